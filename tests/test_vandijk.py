"""Van Dijk et al. (issue 16) by hand: round sizes and steps, the d-rounds-ahead wait rule, the server step
with the message's round step, state, and the ledger's q_i. The device's round (noised at every step) is
tests/test_vandijk_round.py's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet_protocol import LOCAL_SGD_MECHANISM, DPTerms, WireError
from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent
from server.core.privacy import PrivacyPolicy
from server.core.types import Rejection
from server.settings import LIVE_SETTINGS, Settings, strategy_keys
from server.store.codec import decode_state, encode_state
from server.strategies import Arrival, VanDijk, make_strategy
from server.strategies.vandijk import VanDijkSettings, round_size
from tests.memory_store import MemoryStore
from tests.test_privacy_ledger import ask, push, reference_epsilon
from tests.test_privacy_pure import strategy_core


def arrival(device: str, gradient: np.ndarray) -> Arrival:
    return Arrival("t", device, 0, 0, gradient, np.array([1, 1]), 2, 1.0, 0.0)


def test_round_sizes_by_hand():
    assert [round_size(i, "linear", 1.3216, 16) for i in range(4)] == [16, 18, 19, 20]  # 16 + ⌈1.3216 i⌉
    assert [round_size(i, "constant", 9.0, 50) for i in range(3)] == [50, 50, 50]
    z = np.arange(2, 6)
    assert [round_size(i, "ilogi", 2.0, 1) for i in range(4)] == [
        1 + math.ceil(2 * v / math.log(v)) for v in z
    ]
    assert round_size(3, "linear", 50.0, 0) == 150  # Fig. 3's s_i = 50·i


def test_round_steps_by_hand():
    sqrt = VanDijk(learning_rate=0.1, vandijk_a=2.0, vandijk_b=3, vandijk_beta=0.01, vandijk_decay="sqrt")
    linear = VanDijk(learning_rate=0.1, vandijk_a=2.0, vandijk_b=3, vandijk_beta=0.01, vandijk_decay="linear")
    t = [0, 3, 3 + 5, 3 + 5 + 7]  # Σ_{j<i} s_j with s = 3, 5, 7
    for i, ti in enumerate(t):
        assert sqrt.step(i) == pytest.approx(0.1 / (1 + 0.01 * math.sqrt(ti)))
        assert linear.step(i) == pytest.approx(0.1 / (1 + 0.01 * ti))
    assert VanDijk(learning_rate=0.0025, vandijk_beta=0.0).step(7) == 0.0025  # β = 0: constant


@pytest.mark.parametrize("d", [0, 1, 2])
def test_a_device_runs_at_most_d_rounds_ahead_of_the_barrier(d):
    s = VanDijk(vandijk_delay_rounds=d)
    s.on_register("slow")
    g = np.zeros(3, np.float32)
    for i in range(d + 2):  # "fast" completes rounds 0, 1, ... while "slow" completes none (k = 0)
        wait = s.admit(device_id="fast", version=0, now=0.0)
        if i <= d:  # round i − k = i ≤ d: granted
            assert wait is None, (i, d)
            s.receive(arrival("fast", g))
            s.aggregate(np.zeros(3, np.float32))
        else:
            assert wait == "round_ahead" and s.rounds["fast"] == d + 1
    assert s.admit(device_id="slow", version=0, now=0.0) is None
    s.receive(arrival("slow", g))
    s.aggregate(np.zeros(3, np.float32))
    assert s.barrier == 1 and s.admit(device_id="fast", version=0, now=0.0) is None  # k moved: i − k = d


def test_the_server_applies_each_round_sum_with_its_own_round_step():
    s = VanDijk(learning_rate=0.2, vandijk_a=4.0, vandijk_b=2, vandijk_beta=0.1, vandijk_decay="linear")
    u = np.array([1.0, -2.0], np.float32)
    params = np.zeros(2, np.float32)
    s.receive(arrival("a", u))  # a's round 0: η̄_0 = 0.2
    params = s.aggregate(params)
    s.receive(arrival("a", u))  # a's round 1: t = 2, η̄_1 = 0.2 / 1.2
    params = s.aggregate(params)
    s.receive(arrival("b", u))  # b's round 0 again at η̄_0
    params = s.aggregate(params)
    np.testing.assert_allclose(params, -(0.2 + 0.2 / 1.2 + 0.2) * u, rtol=1e-6)
    assert s.rounds == {"a": 2, "b": 1} and s.barrier == 1


def test_terms_state_round_trip_and_settings():
    s = make_strategy("vandijk", vandijk_noise_multiplier=8.0, vandijk_clip=0.1, learning_rate=0.15)
    s.on_register("x")
    s.receive(arrival("x", np.ones(2, np.float32)))
    s.aggregate(np.zeros(2, np.float32))
    dp = s.terms_for(device_id="x", label_counts=np.array([1, 1])).extra["dp"]
    assert dp["mechanism"] == LOCAL_SGD_MECHANISM and dp["round"] == 1 and dp["local_steps"] == 18
    assert dp["step_size"] == pytest.approx(0.15 / (1 + 0.01 * 4)) and dp["noise_multiplier"] == 8.0
    DPTerms.from_json(dp)
    restored = make_strategy("vandijk")
    restored.load_state_dict(decode_state(encode_state(s.state_dict())))
    assert restored.rounds == {"x": 1} and restored.updates == 1
    fields = {f for f in VanDijkSettings.model_fields if f.startswith("vandijk")}
    assert fields <= strategy_keys() and "strategy" in LIVE_SETTINGS["Learning"]  # flat FLEET_VANDIJK_*
    assert Settings(strategy="vandijk", vandijk_b=4, _env_file=None).strategy.vandijk_b == 4


def test_unclipped_terms_are_only_valid_without_noise():
    base = {"mechanism": LOCAL_SGD_MECHANISM, "clip": 0.0, "sampling_rate": 1.0, "expected_batch": 4}
    round_ = {"round": 0, "local_steps": 4, "step_size": 0.1}
    assert DPTerms.from_json({**base, **round_, "noise_multiplier": 0.0}).clip == 0
    with pytest.raises(WireError):
        DPTerms.from_json({**base, **round_, "noise_multiplier": 1.0})
    with pytest.raises(WireError):
        DPTerms.from_json({**base, "noise_multiplier": 0.0})  # no round terms


def test_the_ledger_charges_each_round_at_its_own_sampling_rate():
    store = MemoryStore()
    policy = PrivacyPolicy(clip=1.0, noise_multiplier=1.1, epsilon_budget=None)
    core = strategy_core(
        store, policy, "vandijk", vandijk_a=10.0, vandijk_b=20, vandijk_noise_multiplier=8.0, vandijk_clip=0.1
    )
    device, _ = core.enroll("Pixel")
    n = core.run.manifest.num_params
    rates = []
    for i in range(3):
        grant = ask(core, device, 192)
        assert not isinstance(grant, Rejection), grant
        dp = grant.dp
        assert dp["round"] == i and dp["local_steps"] == 20 + 10 * i == grant.batch_size
        assert dp["sampling_rate"] == pytest.approx((20 + 10 * i) / 192) and dp["clip"] == 0.1
        rates.append(dp["sampling_rate"])
        rng = np.random.default_rng(i)
        u = rng.normal(size=(grant.batch_size, n))
        u /= np.maximum(1.0, np.linalg.norm(u, axis=1, keepdims=True) / 0.1)
        noise = rng.normal(0, 0.8 * math.sqrt(grant.batch_size), n)  # σC per step, s steps
        gradient = (u.sum(0) + noise).astype(np.float32)
        assert push(core, device, grant, gradient, grant.batch_size).applied
    view = core.privacy.device_view(device.device_id)
    expected = reference_epsilon([PrivacyEvent(8.0, q) for q in rates], DEFAULT_DELTA)
    assert view["epsilon"] == pytest.approx(expected, rel=1e-6) and view["tasks"] == 3
    assert core.run.strategy.rounds[device.device_id] == 3


def test_exhausted_projects_the_next_round_at_the_rounds_own_sigma_not_the_policys():
    policy = PrivacyPolicy(clip=1.0, noise_multiplier=1.1, epsilon_budget=0.5)
    core = strategy_core(
        MemoryStore(), policy, "vandijk", vandijk_a=0.0, vandijk_b=20, vandijk_noise_multiplier=8.0
    )
    device, _ = core.enroll("Pixel")
    assert not isinstance(ask(core, device, 192), Rejection)
    q = 20 / 192  # one more round at σ = 8 and this q fits in 0.5
    view = core.privacy.device_view(device.device_id)
    assert view["epsilon"] < 0.15 and not view["exhausted"]
    assert reference_epsilon([PrivacyEvent(8.0, q), PrivacyEvent(1.1, q)], DEFAULT_DELTA) > 0.5  # policy σ
