"""Streams that change over time (issue 31): the recommender's generative model, the drift streams'
defining properties, per-device windows, F1@top-k and prequential evaluation."""

from __future__ import annotations

import time

import numpy as np
import pytest

from models.manifest import builtin
from sim.diurnal import DAY, HOUR
from sim.streams import (
    SEA,
    DeviceStreams,
    HyperplaneParams,
    RandomRBFDrift,
    RandomRBFParams,
    RecentWindow,
    RecommenderParams,
    RecommenderStream,
    RotatingHyperplane,
    SEAParams,
    WindowBound,
    accuracy,
    f1_at_k,
    prequential,
    to_bundle_input,
    top_k,
)


@pytest.fixture(scope="module")
def stream() -> RecommenderStream:
    return RecommenderStream(300, 2, seed=3)


@pytest.fixture(scope="module")
def log(stream: RecommenderStream):  # noqa: ANN201
    return stream.generate()


# ----------------------------------------------------------------------------------------- recommender
def test_recommender_is_deterministic_given_a_seed(log) -> None:  # noqa: ANN001
    again = RecommenderStream(300, 2, seed=3).generate()
    other = RecommenderStream(300, 2, seed=4).generate()
    for name in ("time", "user", "item", "hashtag", "features"):
        np.testing.assert_array_equal(getattr(log, name), getattr(again, name))
    assert len(other) != len(log) or not np.array_equal(other.item, log.item)


def test_recommender_events_fit_the_recommender_bundle(log) -> None:  # noqa: ANN001
    params, manifest = RecommenderParams(), builtin("recommender").manifest
    assert log.features.shape == (len(log), params.n_features)
    assert tuple(manifest.input_shape) == (params.n_features,)
    assert manifest.num_classes == params.n_slots
    assert log.item.min() >= 0 and log.item.max() < params.n_slots
    assert np.all(np.diff(log.time) >= 0) and log.time.min() >= 0 and log.time.max() < 2 * DAY
    assert np.isfinite(log.features).all()


def test_recommender_generates_days_of_a_thousand_users_in_seconds() -> None:
    started = time.perf_counter()
    log = RecommenderStream(1000, 3, seed=0).generate()
    assert time.perf_counter() - started < 5.0
    assert 40_000 < len(log) < 80_000  # 20 events a user a day on average


def test_the_popular_set_turns_over_within_hours(stream: RecommenderStream) -> None:
    def top5(t: float) -> set[int]:
        return set(top_k(stream.popularity(t)[None, :], 5)[0].tolist())

    def overlap(lag_h: float) -> float:
        return float(np.mean([len(top5(h * HOUR) & top5((h + lag_h) * HOUR)) / 5 for h in range(36)]))

    assert overlap(1) > 0.4
    assert overlap(6) < 0.2
    assert overlap(24) < 0.1


def test_fresh_popularity_predicts_far_better_than_a_day_old_one(stream, log) -> None:  # noqa: ANN001
    """The temporality the experiment rests on: an hour-old "most popular" beats a day-old one by > 3x."""
    day2 = log.between(DAY, 2 * DAY)
    fresh = f1_at_k(np.stack([stream.popularity(t - HOUR) for t in day2.time]), day2.item)
    stale = f1_at_k(np.stack([stream.popularity(t - DAY) for t in day2.time]), day2.item)
    assert fresh > 3 * stale


def _favourite_share(stream: RecommenderStream, log) -> float:  # noqa: ANN001
    topic = np.array([stream.topic_at(t)[i] for t, i in zip(log.time, log.item, strict=True)])
    return float(np.mean(topic == stream.affinity.argmax(axis=1)[log.user]))


def test_users_pick_items_of_their_favourite_topics(stream, log) -> None:  # noqa: ANN001
    """With the affinity term, a user's favourite topic gets over twice its share without it (1/16)."""
    indifferent = RecommenderStream(300, 2, RecommenderParams(affinity_strength=0.0), seed=3)
    without = _favourite_share(indifferent, indifferent.generate())
    assert without < 1.5 / stream.params.n_topics
    assert _favourite_share(stream, log) > 2 * without


def test_slots_are_reborn_with_new_hashtags(log) -> None:  # noqa: ANN001
    assert len(np.unique(log.hashtag)) > 2 * len(np.unique(log.item))


def test_recommender_takes_caller_given_times(stream: RecommenderStream) -> None:
    times, users = np.array([7200.0, 3600.0, 90_000.0]), np.array([1, 2, 1])
    log = stream.generate(times, users)
    np.testing.assert_array_equal(log.time, [3600.0, 7200.0, 90_000.0])
    np.testing.assert_array_equal(log.user, [2, 1, 1])


# ----------------------------------------------------------------------------------------- drift streams
def test_sea_label_rule_and_sudden_drift() -> None:
    sea = SEA(SEAParams(noise=0.0, period_hours=1.0))
    rng = np.random.default_rng(0)
    for concept, theta in enumerate(SEAParams().thresholds):
        t = np.full(2000, (concept + 0.5) * HOUR)
        s = sea.draw(t, rng)
        raw = s.X / sea.params.scale
        np.testing.assert_array_equal(s.y, (raw[:, 0] + raw[:, 1] <= theta).astype(int))
    assert sea.concept(4.5 * HOUR) == 0  # the cycle restarts
    noisy = SEA(SEAParams(noise=0.1)).draw(np.zeros(20_000), rng)
    clean = (noisy.X[:, 0] + noisy.X[:, 1] <= 0.8).astype(int)
    assert 0.08 < np.mean(noisy.y != clean) < 0.12


def test_hyperplane_weights_move_only_on_drifting_features() -> None:
    params = HyperplaneParams(noise=0.0)
    plane = RotatingHyperplane(2, params, seed=1)
    w0, w1, w24 = plane.weights(0.0), plane.weights(HOUR), plane.weights(24 * HOUR)
    k = params.n_drift_features
    np.testing.assert_allclose(np.abs(w1[:k] - w0[:k]), params.speed_per_hour)
    np.testing.assert_array_equal(w24[k:], w0[k:])
    assert np.abs(w24[:k] - w0[:k]).max() > 0
    s = plane.draw(np.linspace(0, 2 * DAY, 5000), np.random.default_rng(0))
    w = plane.weights(s.time)
    np.testing.assert_array_equal(s.y, ((w * s.X).sum(1) >= 0.5 * w.sum(1)).astype(int))
    assert 0.3 < s.y.mean() < 0.7


def test_random_rbf_centroids_move_at_their_speed_inside_the_cube() -> None:
    params = RandomRBFParams(n_drift_centroids=20)
    rbf = RandomRBFDrift(params, seed=2)
    c0, c_min = rbf.centroids(0.0), rbf.centroids(60.0)
    moved = np.linalg.norm(c_min - c0, axis=1)
    np.testing.assert_allclose(moved[:20][moved[:20] > 0], params.speed_per_hour / 60, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(moved[20:], 0.0)
    later = rbf.centroids(np.array([5 * HOUR, 50 * HOUR]))
    assert later.shape == (2, params.n_centroids, params.n_features)
    assert later.min() >= 0.0 and later.max() <= 1.0
    s = rbf.draw(np.zeros(3000), np.random.default_rng(0))
    assert set(np.unique(s.y)) <= set(range(params.n_classes))


def test_drift_features_fit_the_builtin_image_bundles() -> None:
    ort = pytest.importorskip("onnxruntime")
    s = SEA().draw(np.arange(5.0), np.random.default_rng(0))
    x = to_bundle_input(s.X)
    assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32
    np.testing.assert_array_equal(x.reshape(5, -1)[:, :3], s.X)
    bundle = builtin("logreg")
    m = bundle.manifest
    session = ort.InferenceSession(bundle.infer_onnx, providers=["CPUExecutionProvider"])
    (logits,) = session.run([m.logits_name], {**m.split(bundle.init_params), m.x_name: x})
    assert logits.shape == (5, 10)


# ----------------------------------------------------------------------------------------- windows
def test_device_window_keeps_recent_own_events_only() -> None:
    device = np.array([0, 1, 0, 0, 0, 1])
    times = np.array([0.0, 5.0, 10.0, 20.0, 30.0, 40.0])
    X = np.arange(6, dtype=np.float32)[:, None]
    streams = DeviceStreams(device, times, X, np.arange(6), bound=WindowBound(max_size=2, max_age_s=15.0))
    t, x, y = streams.window(0, 30.0)
    np.testing.assert_array_equal(t, [20.0, 30.0])
    np.testing.assert_array_equal(streams.window(0, 25.0)[0], [20.0])  # 10 is exactly max_age old: out
    assert streams.window(0, 100.0)[0].size == 0
    np.testing.assert_array_equal(streams.window_sizes(30.0), [2, 0])  # device 1's event at 5 is too old
    bx, by = streams.batch(0, 30.0, 10, np.random.default_rng(0))
    np.testing.assert_array_equal(by, [3, 4])
    d, _, y_next = streams.between(20.0, 40.0)
    np.testing.assert_array_equal(d, [0, 0])


def test_recent_window_matches_the_stateless_view() -> None:
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 10 * HOUR, 300))
    X, y = rng.random((300, 3)).astype(np.float32), rng.integers(0, 2, 300)
    bound = WindowBound(max_size=50, max_age_s=2 * HOUR)
    view = DeviceStreams(np.zeros(300, int), times, X, y, bound=bound)
    window = RecentWindow(bound)
    for lo in range(0, 300, 37):
        window.extend(times[lo : lo + 37], X[lo : lo + 37], y[lo : lo + 37])
        now = times[min(lo + 36, 299)]
        window.expire(now)
        np.testing.assert_array_equal(window.time, view.window(0, now)[0])
    bx, _ = window.batch(20, rng, times[-1])
    assert bx.shape == (20, 3)


def test_device_streams_from_recommender_events(log) -> None:  # noqa: ANN001
    streams = DeviceStreams.from_events(log, n_devices=300)
    sizes = streams.window_sizes(DAY + 12 * HOUR)
    assert sizes.shape == (300,) and sizes.sum() > 0
    assert sizes.max() <= streams.bound.max_size


# ----------------------------------------------------------------------------------------- metrics
def test_f1_at_5_with_one_relevant_item_is_a_third_of_the_hit_rate() -> None:
    scores = np.tile(np.arange(10.0), (3, 1))  # top-5 = items 9..5
    np.testing.assert_array_equal(top_k(scores, 5)[0], [9, 8, 7, 6, 5])
    assert f1_at_k(scores, np.array([9, 5, 0])) == pytest.approx((1 / 3 + 1 / 3 + 0) / 3)
    relevant = np.zeros((1, 10), dtype=bool)
    relevant[0, [9, 8, 0]] = True  # 2 hits: precision 2/5, recall 2/3
    assert f1_at_k(scores[:1], relevant) == pytest.approx(2 * 0.4 * (2 / 3) / (0.4 + 2 / 3))
    assert accuracy(scores, np.array([9, 9, 1])) == pytest.approx(2 / 3)


def test_prequential_scores_each_chunk_before_training_on_it() -> None:
    calls: list[tuple[str, float]] = []

    def score(lo: float, hi: float) -> float:
        calls.append(("score", lo))
        return lo / HOUR

    def update(lo: float, hi: float) -> None:
        calls.append(("update", lo))

    starts, values = prequential(0.0, 3 * HOUR, score, update)
    np.testing.assert_array_equal(starts, [0.0, HOUR, 2 * HOUR])
    np.testing.assert_array_equal(values, [0, 1, 2])
    assert calls == [(kind, h * HOUR) for h in range(3) for kind in ("score", "update")]
