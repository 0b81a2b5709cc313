"""The EqualShare and Momentum wrappers (issue 28): by hand, bounded, and persisted."""

from __future__ import annotations

import numpy as np
import pytest

from server.store.codec import decode_state, encode_state
from server.strategies import Arrival, FedBuff, make_strategy
from server.strategies.fairness import EqualShare
from server.strategies.wrappers import Momentum


def arrival(device: str, gradient=(1.0,), task: str = "t") -> Arrival:
    return Arrival(task, device, 0, 0, np.asarray(gradient, np.float32), None, 2, None, 0.0)


def test_a_device_arriving_three_times_as_often_is_weighed_a_third_as_much():
    strategy = EqualShare(FedBuff(learning_rate=1.0, k=100), window=8)
    weights = [strategy.receive(arrival(d)) for d in "ffffffss"[:6] + "fs"]  # warm the window
    weights = [strategy.receive(arrival(d)) for d in "fffsfffs"]  # steady state: f 6 of 8, s 2 of 8
    fast, slow = weights[-2], weights[-1]
    assert fast == pytest.approx(4 / 6) and slow == pytest.approx(4 / 2)
    assert slow / fast == pytest.approx(3.0)
    # the buffered weight is the one the step uses
    assert strategy.buffer[-1].weight == pytest.approx(slow)


def test_shares_average_to_one_so_the_rate_is_unchanged():
    strategy = EqualShare(FedBuff(learning_rate=1.0, k=10_000), window=60)
    rng = np.random.default_rng(0)
    devices = rng.choice(["a", "b", "c", "d"], p=[0.55, 0.25, 0.15, 0.05], size=600)
    weights = [strategy.receive(arrival(str(d))) for d in devices]
    assert np.mean(weights[-60:]) == pytest.approx(1.0, abs=0.25)
    assert max(weights[-60:]) / min(weights[-60:]) > 3  # and yet they differ: the rare device weighs more


def test_a_lone_rare_device_is_not_weighed_beyond_the_cap():
    strategy = EqualShare(FedBuff(learning_rate=1.0, k=1000), window=100, cap=4.0)
    for _ in range(99):
        strategy.receive(arrival("busy"))
    assert strategy.receive(arrival("rare")) == pytest.approx(4.0)  # 50 / 1, capped
    assert strategy.receive(arrival("busy")) >= 1 / 4.0


def test_an_arrival_a_defence_withheld_still_counts_so_the_one_that_passes_is_not_weighed_up():
    """Issue 30: FLTrust with a floor dropped 96% of ALIE's pushes; counted only when they passed, the
    attackers looked rare and the few that passed weighed 4x."""
    from server.strategies.trusted_score import TrustedScore

    class Reference:
        def gradient(self, label=None):
            return np.float32([1.0, 0.0])

    inner = EqualShare(FedBuff(learning_rate=1.0, k=1000), window=100, cap=4.0)
    defended = TrustedScore(inner, test="fltrust", scale="fleet-down", reference=Reference())
    for i in range(10):
        defended.receive(arrival("honest", (1.0, 0.1), f"h{i}"))
        assert defended.receive(arrival("attacker", (-1.0, 0.0), f"a{i}")) == 0.0  # withheld, counted
    assert inner.counts == {"honest": 10, "attacker": 10}
    assert defended.receive(arrival("attacker", (1.0, 0.1), "passes")) <= 1.0 + 1e-6  # not 4x
    uncounted = EqualShare(FedBuff(learning_rate=1.0, k=1000), window=100, cap=4.0)
    for i in range(10):
        uncounted.receive(arrival("honest", (1.0, 0.1), f"h{i}"))
    assert uncounted.receive(arrival("attacker", (1.0, 0.1), "passes")) > 3.0  # what the hook prevents


def test_equal_shares_survive_a_restart():
    strategy = EqualShare(FedBuff(learning_rate=1.0, k=100), window=5)
    for d in "aabab":
        strategy.receive(arrival(d))
    restored = EqualShare(FedBuff(learning_rate=1.0, k=100), window=5)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert restored.counts == strategy.counts == {"a": 3, "b": 2}
    assert restored.share("b") == strategy.share("b")


def test_momentum_adds_beta_times_the_last_move():
    strategy = Momentum(FedBuff(learning_rate=1.0, k=1), beta=0.5)
    params = np.zeros(1, np.float32)
    moves = []
    for _ in range(3):
        strategy.receive(arrival("a", (1.0,)))
        new = strategy.aggregate(params)
        moves.append(float((new - params)[0]))
        params = new
    assert moves == pytest.approx([-1.0, -1.5, -1.75])
    restored = Momentum(FedBuff(learning_rate=1.0, k=1), beta=0.5)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    np.testing.assert_allclose(restored.velocity, strategy.velocity)


WRAPPED = [{"name": "equal-share", "window": 50}, {"name": "momentum", "beta": 0.8}]


@pytest.mark.parametrize("wrapper", WRAPPED)
def test_the_new_wrappers_are_chosen_from_settings(wrapper):
    from server.compose import build_strategy
    from server.settings import Settings

    strategy = build_strategy(Settings(_env_file=None, strategy="fedbuff", wrappers=[wrapper]))
    assert type(strategy).__name__ == {"equal-share": "EqualShare", "momentum": "Momentum"}[wrapper["name"]]
    assert make_strategy("fedbuff-equal", share_window=7).window == 7


def stale(device: str, tau: int, task: str = "t") -> Arrival:
    return Arrival(task, device, 0, tau, np.ones(1, np.float32), None, 2, None, 0.0)


def test_fleet_staleness_dampens_every_gradient_by_the_fleets_median_not_its_own():
    from server.strategies import DynSGD
    from server.strategies.fairness import FleetStaleness

    strategy = FleetStaleness(DynSGD(learning_rate=1.0, k=100), window=5)
    weights = [strategy.receive(stale("fast", 1)) for _ in range(3)]  # median 1: 1/2 each
    assert weights == pytest.approx([0.5, 0.5, 0.5])
    slow = strategy.receive(stale("slow", 19))  # its own τ would give 1/20; the fleet's median is 1
    assert slow == pytest.approx(0.5)
    restored = FleetStaleness(DynSGD(learning_rate=1.0, k=100), window=5)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert list(restored.recent) == [1, 1, 1, 19]


def test_dynsgd_equal_is_its_composition():
    from server.strategies import DynSGDEqual
    from server.strategies.fairness import FleetStaleness
    from server.strategies.wrappers import ClipNorm, WarmUp

    strategy = make_strategy("dynsgd-equal", share_window=50)
    assert isinstance(strategy, DynSGDEqual) and strategy.learning_rate == 0.5 and strategy.k == 1
    fleet = strategy.inner
    assert isinstance(fleet, FleetStaleness) and fleet.window == 50
    assert isinstance(fleet.inner, WarmUp) and isinstance(fleet.inner.inner, ClipNorm)
    assert fleet.inner.inner.factor == 2.0 and strategy.describe()["strategy"] == "dynsgd-equal"


def test_concurrency_scale_leaves_the_rate_alone_up_to_its_reference_then_shrinks_it_as_one_over_tau():
    from server.strategies.fairness import ConcurrencyScale

    strategy = ConcurrencyScale(FedBuff(learning_rate=1.0, k=1000), reference=20.0, window=5)
    calm = [
        strategy.receive(stale("a", tau)) for tau in (3, 20, 20)
    ]  # median ≤ 20: only FedBuff's 1/sqrt(1+τ)
    assert calm == pytest.approx([1 / np.sqrt(4), 1 / np.sqrt(21), 1 / np.sqrt(21)])
    for _ in range(5):
        crowded = strategy.receive(stale("a", 80))  # 1,000 devices in flight: τ̄ = 80, a quarter of the rate
    assert strategy.factor() == pytest.approx(0.25)
    assert crowded == pytest.approx(0.25 / np.sqrt(81)) and strategy.buffer[-1].weight == pytest.approx(
        crowded
    )
    assert strategy.describe()["concurrency_factor"] == 0.25
    square_root = ConcurrencyScale(FedBuff(learning_rate=1.0, k=10), reference=20.0, power=0.5, window=1)
    square_root.receive(stale("a", 80))
    assert square_root.factor() == pytest.approx(0.5)
    restored = ConcurrencyScale(FedBuff(learning_rate=1.0, k=1000), reference=20.0, window=5)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert restored.factor() == pytest.approx(0.25)


def test_concurrency_scale_reads_a_spread_staleness_as_up_to_half_as_stale_for_the_rate_alone():
    from server.strategies.fairness import ConcurrencyScale

    def scale(staleness: list[int]) -> ConcurrencyScale:
        strategy = ConcurrencyScale(
            FedBuff(learning_rate=1.0, k=1000), reference=5.0, window=200, cap_reference=6.0, spread=1.0
        )
        for tau in staleness:
            strategy.receive(stale("a", tau))
        return strategy

    equal = scale([19, 20, 20, 21, 20] * 40)  # equal task times: as without the spread
    assert equal.spread_factor() == 1.0 and equal.factor() == pytest.approx(5 / 20)
    spread = scale(list(range(4, 44)) * 5)  # a 30x speed spread: p10 7.9, p50 23.5, p90 39.1
    assert spread.spread_factor() == pytest.approx((39.1 - 7.9) / 23.5, abs=1e-3)
    assert spread.factor() == pytest.approx(5 * spread.spread_factor() / 23.5, abs=1e-3)
    assert spread.cap_factor() == pytest.approx(6 / 23.5)  # the step cap reads τ̄ as it is
    assert spread.describe()["staleness_spread_factor"] == pytest.approx(1.3277, abs=1e-3)
    widest = scale([1] * 80 + [10] * 40 + [100] * 80)  # D = 9.9, bounded by 2
    assert widest.spread_factor() == 2.0
    assert scale(list(range(4, 44)) * 4).spread_factor() == 1.0  # 160 arrivals: not before the window is full
    small = scale([0, 1, 2, 3, 4] * 40)  # a small fleet, τ̄ under the reference: the rate as set
    assert small.factor() == 1.0


def test_the_default_shrinks_its_step_on_a_crowded_fleet_and_not_on_a_small_one():
    strategy = make_strategy("fedbuff-equal")
    for _ in range(200):
        strategy.receive(stale("a", 4))
    assert strategy.describe()["concurrency_factor"] == 1.0
    for _ in range(200):
        strategy.receive(stale("a", 200))
    assert strategy.describe()["concurrency_factor"] == pytest.approx(
        0.025
    )  # reference 5 over a median staleness of 200


def sized(batch: int, device: str = "d") -> Arrival:
    return Arrival("t", device, 0, 0, np.ones(3, np.float32), None, batch, None, 0.0)


def test_sample_weight_weighs_by_the_batch_and_changes_nothing_when_batches_are_equal():
    from server.strategies.fairness import SampleWeight

    plain, weighed = FedBuff(learning_rate=0.5, k=4), SampleWeight(FedBuff(learning_rate=0.5, k=4))
    params = np.zeros(3, np.float32)
    for strategy in (plain, weighed):
        for _ in range(4):
            strategy.receive(sized(37))
    assert [b.weight for b in weighed.inner.buffer] == [b.weight for b in plain.buffer]  # exactly 1
    np.testing.assert_array_equal(weighed.aggregate(params), plain.aggregate(params))
    # unequal: weights in proportion to the batch, their mean 1 over the window (square root: halfway)
    strategy = SampleWeight(FedBuff(learning_rate=1.0, k=100), window=4)
    weights = [strategy.receive(sized(b)) for b in (100, 100, 25, 25)]
    assert weights == [
        pytest.approx(w) for w in (1.0, 1.0, 25 / 75, 25 / 62.5)
    ]  # each against the mean so far
    root = SampleWeight(FedBuff(learning_rate=1.0, k=100), power=0.5, window=4)
    assert [root.receive(sized(b)) for b in (100, 100, 25, 25)][-1] == pytest.approx((25 / 62.5) ** 0.5)


def test_sample_weight_persists_and_is_a_setting_of_the_default():
    from server.strategies.fairness import SampleWeight

    strategy = SampleWeight(FedBuff(learning_rate=1.0, k=100), window=4)
    for b in (100, 50, 50):
        strategy.receive(sized(b))
    restored = SampleWeight(FedBuff(learning_rate=1.0, k=100), window=4)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert restored.receive(sized(100)) == pytest.approx(strategy.receive(sized(100)))
    assert any(
        isinstance(layer, SampleWeight) for layer in _layers(make_strategy("fedbuff-equal"))
    )  # default
    unweighed = make_strategy("fedbuff-equal", sample_weight=None)
    assert not any(isinstance(layer, SampleWeight) for layer in _layers(unweighed))


def _layers(strategy):
    while hasattr(strategy, "inner"):
        yield strategy
        strategy = strategy.inner
