"""Strategy math against hand-computed values, and the interface's triggers and persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from server.core.admission import AdmissionController
from server.store.codec import decode_state, encode_state
from server.strategies import AdaSGD, Arrival, DynSGD, FedAvgAsync, make_strategy
from server.strategies.dampening import adasgd_beta, exp_dampening, inverse_dampening
from server.strategies.similarity import bhattacharyya


def arrival(tau: int, counts, gradient=None, at: float = 0.0) -> Arrival:
    counts = np.asarray(counts)
    gradient = np.ones(3, np.float32) if gradient is None else gradient
    return Arrival("t", "d", 0, tau, gradient, counts, int(counts.sum()), 1.0, at)


def test_beta_makes_adasgd_cross_dynsgd_at_half_tau_thres():
    beta = adasgd_beta(12)
    assert exp_dampening(6, beta) == pytest.approx(1 / 7)  # the thesis's Λ(6) ≈ 0.14 for τ_thres = 12
    assert beta == pytest.approx(2 * math.log(7) / 12)
    for thres in (2, 5, 30, 100):
        assert exp_dampening(thres / 2, adasgd_beta(thres)) == pytest.approx(inverse_dampening(thres / 2))
    with pytest.raises(ValueError):
        adasgd_beta(0)


def test_bhattacharyya_by_hand():
    assert bhattacharyya([1, 0], [1, 0]) == pytest.approx(1.0)
    assert bhattacharyya([1, 0], [0, 1]) == 0.0
    assert bhattacharyya([1, 1], [1, 0]) == pytest.approx(math.sqrt(0.5))
    assert bhattacharyya([5, 0, 0, 5], [1, 1, 1, 1]) == pytest.approx(2 * math.sqrt(0.5 * 0.25))
    assert bhattacharyya([0, 0], [1, 1]) == 0.0


def test_adasgd_bootstraps_with_dynsgd_then_uses_the_percentile():
    strategy = AdaSGD(bootstrap=10, percentile=100.0, boost_scope="none")
    for tau in range(10):
        assert strategy.weigh(arrival(tau, [1, 1])) == pytest.approx(1 / (tau + 1))
    assert strategy.current_tau_thres() == 9.0
    beta = adasgd_beta(9.0)
    assert strategy.weigh(arrival(4, [1, 1])) == pytest.approx(math.exp(-beta * 4))
    # staleness_cap: a straggler far past τ_thres keeps the floor weight Λ(τ_thres)
    assert strategy.weigh(arrival(40, [1, 1])) == pytest.approx(math.exp(-beta * 9.0))
    uncapped = AdaSGD(bootstrap=0, tau_thres=9.0, staleness_cap=False, boost_scope="none")
    assert uncapped.weigh(arrival(40, [1, 1])) == pytest.approx(math.exp(-beta * 40))


def test_similarity_boost_with_floor_and_ceiling():
    strategy = AdaSGD(bootstrap=0, tau_thres=12.0, boost_floor=0.1)
    damp = 1 / 7
    strategy.weigh(arrival(0, [100, 0, 0, 0]))  # global distribution: only label 0 seen
    rare = strategy.weigh(arrival(6, [0, 10, 0, 0]))  # sim 0 → floor 0.1 → 10× boost, capped at 1
    assert rare == pytest.approx(min(1.0, damp / 0.1))
    strategy = AdaSGD(bootstrap=0, tau_thres=12.0)
    strategy.weigh(arrival(0, [50, 50, 0, 0]))
    sim = bhattacharyya([1, 1, 0, 0], [50, 50, 0, 0])
    assert strategy.weigh(arrival(12, [5, 5, 0, 0])) == pytest.approx(
        exp_dampening(12, adasgd_beta(12)) / sim
    )
    half = bhattacharyya([0, 1, 0, 0], [55, 55, 0, 0])
    assert strategy.weigh(arrival(12, [0, 4, 0, 0])) == pytest.approx(
        exp_dampening(12, adasgd_beta(12)) / half
    )


def test_boost_only_for_stragglers_when_scoped():
    strategy = AdaSGD(bootstrap=0, tau_thres=10.0, boost_scope="stragglers")
    strategy.weigh(arrival(0, [10, 0]))
    on_time = strategy.weigh(arrival(5, [0, 10]))
    assert on_time == pytest.approx(exp_dampening(5, adasgd_beta(10)))
    straggler = strategy.weigh(arrival(16, [0, 10]))  # τ > 1.5 τ_thres: boosted
    assert straggler > exp_dampening(10, adasgd_beta(10))


def test_weighted_global_counts_keep_damped_labels_rare():
    plain, weighted = (
        AdaSGD(bootstrap=0, tau_thres=10.0),
        AdaSGD(bootstrap=0, tau_thres=10.0, global_counts="weighted"),
    )
    for strategy in (plain, weighted):
        strategy.weigh(arrival(0, [10, 0]))
        strategy.weigh(arrival(30, [0, 10]))  # a damped straggler with label 1
    assert weighted.similarity(np.array([0, 1])) < plain.similarity(np.array([0, 1]))


def test_baselines():
    assert DynSGD().weigh(arrival(3, [1])) == 0.25
    assert FedAvgAsync().weigh(arrival(50, [1])) == 1.0
    with pytest.raises(ValueError, match="unknown strategy"):
        make_strategy("nope")


def test_k_and_time_window_triggers_and_the_update():
    strategy = DynSGD(learning_rate=0.5, k=3, time_window=10.0)
    params = np.zeros(3, np.float32)
    strategy.receive(arrival(0, [1], np.array([1, 0, 0], np.float32), at=0.0))
    strategy.receive(arrival(1, [1], np.array([0, 2, 0], np.float32), at=1.0))
    assert not strategy.ready(now=5.0)
    assert strategy.ready(now=10.0)  # the window since the first buffered gradient elapsed
    strategy.receive(arrival(3, [1], np.array([0, 0, 4], np.float32), at=2.0))
    assert strategy.ready(now=2.0)  # K reached
    new = strategy.aggregate(params)
    np.testing.assert_allclose(new, -0.5 * np.array([1.0, 0.5 * 2, 0.25 * 4]))
    assert strategy.buffer == [] and strategy.updates == 1 and params.sum() == 0


def test_state_survives_a_round_trip_through_storage():
    strategy = AdaSGD(bootstrap=3, k=4)
    for tau in (1, 2, 3, 4):
        strategy.receive(arrival(tau, [tau, 1], np.full(3, tau, np.float32)))
    restored = AdaSGD(bootstrap=3, k=4)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert restored.current_tau_thres() == strategy.current_tau_thres()
    assert restored.similarity(np.array([1, 1])) == strategy.similarity(np.array([1, 1]))
    params = np.zeros(3, np.float32)
    # exact: both sides computed here, on this CPU, from the same state (what the round trip must keep)
    np.testing.assert_array_equal(restored.aggregate(params), strategy.aggregate(params))
    assert "AdaSGD(" in repr(restored) and "boost_floor=0.1" in repr(restored)


def test_admission_thresholds_drop_the_requested_fraction():
    controller = AdmissionController(size_drop=0.4, similarity_drop=0.2, min_history=10)
    rng = np.random.default_rng(0)
    sizes = rng.normal(100, 33, 2000).clip(1).astype(int)
    sims = rng.random(2000)
    reasons = [controller.check(int(s), float(q)) for s, q in zip(sizes, sims, strict=True)]
    small = reasons.count("small_batch") / len(reasons)
    similar = reasons.count("too_similar") / len(reasons)
    assert 0.35 < small < 0.45
    assert 0.08 < similar < 0.16  # 20% of the 60% left after the size threshold
    assert AdmissionController().check(1, 0.99) is None  # p = 0 accepts all


def test_adasgd_percentile_matches_numpy_bit_for_bit():
    """τ_thres comes from a sorted window kept up to date per gradient, not np.percentile over an
    array: the same float64 operations, so the same value, also across a state round trip."""
    import random

    from server.strategies.adasgd import linear_percentile

    rng = random.Random(5)
    for _ in range(3000):
        values = sorted(rng.randint(0, rng.choice([3, 40, 5000])) for _ in range(rng.randint(1, 80)))
        q = rng.choice([99.7, 99.0, 50.0, 0.0, 100.0, rng.uniform(0, 100)])
        assert linear_percentile(values, q) == float(np.percentile(np.asarray(values, float), q))
    strategy = AdaSGD(bootstrap=5, window=40)
    gradient, counts = np.zeros(3, np.float32), np.ones(3, np.int64)
    for i in range(300):
        strategy.receive(Arrival(str(i), "d", 0, rng.randint(0, 50), gradient, counts, 3, 1.0, float(i)))
        seen = np.fromiter(strategy.staleness_seen, float)
        expected = None if seen.size < 5 else max(1.0, float(np.percentile(seen, strategy.percentile)))
        assert strategy.current_tau_thres() == expected
    restored = AdaSGD(bootstrap=5, window=40)
    restored.load_state_dict(strategy.state_dict())
    assert restored.current_tau_thres() == strategy.current_tau_thres()
