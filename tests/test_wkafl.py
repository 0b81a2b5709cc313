"""WKAFL, TWAFL and SASGD (issue 17) against hand-computed values; Alg. 4's partitioner; state; the sim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from server.compose import build_strategy
from server.settings import LIVE_SETTINGS, Settings, strategy_keys
from server.store.codec import decode_state, encode_state
from server.strategies import SASGD, TWAFL, WKAFL, Arrival, make_strategy
from server.strategies.kasync import staleness_weight
from server.strategies.wkafl import WKAFLSettings, clip_rows, cosine, min_staleness_rate, selection
from sim.data import make_partition, partition_label_skew


def arrival(gradient, *, tau: int = 0, loss: float = 1.0, batch: int = 4, device: str = "d") -> Arrival:
    g = np.asarray(gradient, np.float32)
    return Arrival(f"t{device}{tau}", device, 0, tau, g, np.zeros(10), batch, loss, 0.0)


def step(strategy, gradients, *, taus=None, losses=None, params=None) -> np.ndarray:
    taus = taus or [0] * len(gradients)
    losses = losses or [1.0] * len(gradients)
    for i, (g, tau, loss) in enumerate(zip(gradients, taus, losses, strict=True)):
        strategy.receive(arrival(g, tau=tau, loss=loss, device=str(i)))
    assert strategy.ready(0.0)
    return strategy.aggregate(np.zeros(len(gradients[0]), np.float32) if params is None else params)


# -- the formulas ----------------------------------------------------------------------------------
def test_staleness_weight_is_e_over_2_to_the_minus_tau():
    assert staleness_weight(0) == 1.0
    assert staleness_weight(1) == pytest.approx(2 / math.e)  # 0.73576
    assert staleness_weight(2) == pytest.approx(4 / math.e**2)  # 0.54134
    assert staleness_weight(5000) == 0.0  # underflows, never raises


def test_clip_cosine_selection_and_rate_by_hand():
    np.testing.assert_allclose(clip_rows(np.array([[3.0, 4.0], [0.0, 1.0]]), 2.5), [[1.5, 2.0], [0.0, 1.0]])
    np.testing.assert_allclose(clip_rows(np.array([[3.0, 4.0]]), 0.0), [[0.0, 0.0]])
    rows = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [-2.0, 0.0]])
    np.testing.assert_allclose(cosine(rows, np.array([3.0, 0.0])), [1.0, math.sqrt(0.5), 0.0, -1.0])
    # p' = exp(2·sim) for sim ≥ 0.3: e², e¹, 0 → p = e/(e+1), 1/(e+1), 0
    p = selection(np.array([1.0, 0.5, 0.2]), beta=2.0, sim_min=0.3)
    np.testing.assert_allclose(p, [math.e / (math.e + 1), 1 / (math.e + 1), 0.0])
    assert not selection(np.array([0.1, 0.2]), beta=10.0, sim_min=0.3).any()
    assert min_staleness_rate(0.1, 0.1, [5, 3, 9]) == pytest.approx(0.1 / 1.3)


# -- WKAFL end to end of one step -------------------------------------------------------------------
def test_quorum_waits_for_k_and_reports_the_staleness_weight():
    strategy = WKAFL(learning_rate=1.0, k=3)
    assert strategy.receive(arrival([1.0, 0.0], tau=1)) == pytest.approx(2 / math.e)
    assert not strategy.ready(0.0)
    strategy.receive(arrival([1.0, 0.0], device="b"))
    assert not strategy.ready(0.0)
    strategy.receive(arrival([1.0, 0.0], device="c"))
    assert strategy.ready(0.0)


def test_an_inconsistent_gradient_is_not_applied():
    # ḡ = [1/3, 0]; cos(g3, ḡ) = −1 < 0.3 → p = [½, ½, 0] → g = [1, 0] (a plain mean would step [1/3, 0])
    strategy = WKAFL(learning_rate=0.5, k=3, wkafl_alpha=0.0)
    new = step(strategy, [[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_allclose(new, [-0.5, 0.0], atol=1e-7)
    assert strategy.last["selected"] == 2 and strategy.stage == 1


def test_staleness_weights_the_estimate_and_tau_min_sets_the_rate():
    # a = [1, 2/e] → ḡ = (e·[1,0] + 2·[0,1])/(e+2); both pass sim_min 0 with p ∝ exp(0) (β = 0) → mean
    strategy = WKAFL(
        learning_rate=1.0, k=2, wkafl_alpha=0.0, wkafl_beta=0.0, wkafl_sim_min=0.0, wkafl_gamma=0.5
    )
    new = step(strategy, [[1.0, 0.0], [0.0, 1.0]], taus=[2, 3])
    np.testing.assert_allclose(new, [-0.25, -0.25], rtol=1e-6)  # η = 1/(0.5·2 + 1) = ½, g = [½, ½]
    np.testing.assert_allclose(strategy.previous, [math.e / (math.e + 2), 2 / (math.e + 2)], rtol=1e-6)


def test_nothing_consistent_falls_back_to_the_estimate():
    strategy = WKAFL(learning_rate=1.0, k=2, wkafl_sim_min=0.99, wkafl_alpha=0.0)
    new = step(strategy, [[1.0, 0.0], [0.0, 1.0]])  # cos = 0.707 < 0.99 for both: apply ḡ = [½, ½]
    np.testing.assert_allclose(new, [-0.5, -0.5], rtol=1e-6)
    assert strategy.last["selected"] == 0


def test_clip_bound_cb_applies_before_the_estimate():
    strategy = WKAFL(learning_rate=1.0, k=2, wkafl_alpha=0.0, wkafl_clip=1.0)
    new = step(strategy, [[30.0, 40.0], [0.0, 0.5]])  # → [0.6, 0.8] and [0, 0.5]
    # ḡ = [0.3, 0.65], ‖ḡ‖ = 0.71589; cos: 0.7/0.71589 = 0.97780 and 0.325/0.35795 = 0.90795, β = 10
    p1 = 1 / (1 + math.exp(10 * (0.90795 - 0.97780)))  # 0.6679
    expected = -(p1 * np.array([0.6, 0.8]) + (1 - p1) * np.array([0.0, 0.5]))
    np.testing.assert_allclose(new, expected, rtol=2e-3)


@pytest.mark.parametrize("momentum, expected", [("estimate", [-1 / 3, -1.0]), ("aggregate", [-1.0, -1.0])])
def test_momentum_adds_the_previous_estimate_or_the_previous_step(momentum, expected):
    strategy = WKAFL(learning_rate=1.0, k=3, wkafl_alpha=1.0, wkafl_momentum=momentum, wkafl_sim_min=0.3)
    step(strategy, [[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])  # ḡ = [1/3, 0]; the step applied g = [1, 0]
    strategy.alpha = 1.0
    new = step(strategy, [[0.0, 1.0]] * 3)  # g̃ = [0, 1] + m
    np.testing.assert_allclose(new, expected, rtol=1e-6)


def test_stage_two_switches_on_mean_loss_stays_and_clips_to_b_times_the_estimate():
    kw = dict(learning_rate=1.0, k=2, wkafl_alpha=0.0, wkafl_stage2_clip=0.1, wkafl_loss_threshold=0.5)
    stage1 = WKAFL(**kw)
    np.testing.assert_allclose(step(stage1, [[10.0, 0.0], [1.0, 0.0]], losses=[2.0, 0.1]), [-5.5, 0.0])
    assert stage1.stage == 1  # mean loss 1.05 > 0.5 (a sum test at ε would differ)
    stage2 = WKAFL(**kw)
    # mean loss 0.45 ≤ 0.5: ḡ = [5.5, 0], each clipped to 0.1·5.5 = 0.55 → g = [0.55, 0]
    np.testing.assert_allclose(step(stage2, [[10.0, 0.0], [1.0, 0.0]], losses=[0.4, 0.5]), [-0.55, 0.0])
    assert stage2.stage == 2 and stage2.describe()["stage"] == 2
    step(stage2, [[1.0, 0.0], [1.0, 0.0]], losses=[9.0, 9.0])
    assert stage2.stage == 2  # sticky
    off = WKAFL(**{**kw, "wkafl_loss_threshold": 0.0})
    step(off, [[1.0, 0.0], [1.0, 0.0]], losses=[0.0, 0.0])
    assert off.stage == 1
    by_count = WKAFL(**{**kw, "wkafl_loss_threshold": None, "wkafl_switch_update": 1})
    step(by_count, [[1.0, 0.0], [1.0, 0.0]])
    assert by_count.stage == 1
    step(by_count, [[1.0, 0.0], [1.0, 0.0]])
    assert by_count.stage == 2


def test_state_round_trips_through_the_store_codec():
    original = WKAFL(learning_rate=0.3, k=2, wkafl_loss_threshold=0.5)
    step(original, [[1.0, 2.0], [0.5, 1.0]], losses=[0.1, 0.1])
    original.receive(arrival([0.0, 1.0], tau=2, loss=0.7))
    restored = WKAFL(learning_rate=0.3, k=2, wkafl_loss_threshold=0.5)
    restored.load_state_dict(decode_state(encode_state(original.state_dict())))
    assert restored.stage == 2 and restored.updates == 1 and restored.tags == original.tags
    np.testing.assert_array_equal(restored.previous, original.previous)
    params = np.ones(2, np.float32)
    for strategy in (original, restored):
        strategy.receive(arrival([1.0, 1.0], device="x"))
    np.testing.assert_array_equal(original.aggregate(params), restored.aggregate(params))


# -- the baselines -----------------------------------------------------------------------------------
def test_twafl_weighs_batch_share_times_staleness_normalised():
    # weights 2·1 and 4·(2/e) → e/(e+4) and 4/(e+4)
    strategy = TWAFL(learning_rate=1.0, k=2)
    strategy.receive(arrival([1.0, 0.0], batch=2))
    strategy.receive(arrival([0.0, 1.0], tau=1, batch=4, device="b"))
    new = strategy.aggregate(np.zeros(2, np.float32))
    np.testing.assert_allclose(new, [-math.e / (math.e + 4), -4 / (math.e + 4)], rtol=1e-6)
    strategy.receive(arrival([1.0, 0.0], tau=4000))
    strategy.receive(arrival([0.0, 1.0], tau=3000, device="b"))  # both underflow: the least stale alone
    np.testing.assert_allclose(strategy.aggregate(np.zeros(2, np.float32)), [0.0, -1.0])


def test_sasgd_rates_each_gradient_by_one_over_tau_and_averages_k():
    strategy = SASGD(learning_rate=0.2, k=2)
    assert strategy.receive(arrival([1.0, 0.0])) == 1.0
    assert strategy.receive(arrival([0.0, 1.0], tau=3, device="b")) == pytest.approx(0.25)
    new = strategy.aggregate(np.zeros(2, np.float32))
    np.testing.assert_allclose(new, [-0.1, -0.025], rtol=1e-6)  # 0.2 · ([1, 0] + [0, ¼]) / 2


def test_all_three_are_selectable_by_name_with_their_settings():
    for name, cls in (("wkafl", WKAFL), ("twafl", TWAFL), ("sasgd", SASGD)):
        assert isinstance(make_strategy(name), cls)
        assert isinstance(build_strategy(Settings(strategy=name, k=4, _env_file=None)), cls)
    built = build_strategy(Settings(strategy="wkafl", wkafl_loss_threshold=0, wkafl_momentum="aggregate",
                                    wkafl_switch_update=7, _env_file=None))  # fmt: skip
    assert built.loss_threshold == 0 and built.momentum == "aggregate" and built.switch_update == 7
    with pytest.raises(ValueError):
        WKAFL(wkafl_momentum="both")
    fields = set(WKAFLSettings.model_fields) - {"name", "learning_rate", "k", "time_window"}
    assert fields <= strategy_keys() and "strategy" in LIVE_SETTINGS["Learning"]  # flat FLEET_WKAFL_*


# -- Alg. 4 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("classes", [1, 5, 10])
def test_label_skew_gives_each_device_l_num_labels_and_10_to_49_examples(classes):
    labels = np.repeat(np.arange(10), 100)
    parts = partition_label_skew(labels, 300, np.random.default_rng(0), classes_per_device=classes)
    assert len(parts) == 300
    assert {len(np.unique(labels[p])) for p in parts} == {classes}
    sizes = [len(p) for p in parts]
    assert min(sizes) >= 10 and max(sizes) <= 49 and len(set(sizes)) > 10
    assert all(len(np.unique(p)) == len(p) for p in parts)  # no example twice on one device
    if classes == 1:  # every label is someone's
        assert {int(labels[p[0]]) for p in parts} == set(range(10))
    again = partition_label_skew(labels, 300, np.random.default_rng(0), classes_per_device=classes)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_label_skew_by_name_and_its_errors():
    labels = np.repeat(np.arange(10), 20)
    parts = make_partition("wkafl-L2", labels, 5, np.random.default_rng(1))
    assert {len(np.unique(labels[p])) for p in parts} == {2}
    with pytest.raises(ValueError):
        make_partition("wkafl-Lx", labels, 5, np.random.default_rng(1))
    with pytest.raises(ValueError):
        partition_label_skew(labels, 5, np.random.default_rng(1), classes_per_device=11)


# -- through the coordinator, in the simulator -------------------------------------------------------
def test_wkafl_runs_through_the_coordinator_in_the_simulator():
    from models.manifest import builtin
    from sim.controlled import RunConfig, Workbench, run_controlled
    from sim.data import load_mnist
    from sim.staleness import D2

    train, test = load_mnist(seed=0)
    bench = Workbench(builtin("logreg"), train, test)
    parts = partition_label_skew(train.y, 50, np.random.default_rng(2), classes_per_device=5)
    factory = lambda: make_strategy("wkafl", learning_rate=0.1, k=5)  # noqa: E731
    result = run_controlled(bench, RunConfig(factory, parts, 3, D2, batch_mean=8, cap=40, eval_every=20))
    assert result.updates[-1] == 40 and result.accuracy[-1] > 0.3
    assert max(result.staleness) > 0
