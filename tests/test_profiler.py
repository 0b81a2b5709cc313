"""Tests of I-Prof (profiler/): cold start, PA personalisation, SLO bounds, guards and persistence."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import SGDRegressor

from profiler import ENERGY_FEATURES, FEATURES, BatchDecision, IProf, SlopeRegressor
from profiler.slope import pa1_step

GB = 1024**3
# True time slope (ms/sample) is linear in the raw features: less memory, hotter, slower clocks → slower.
W_TIME = np.array([-1.0 / GB, -0.5 / GB, 0.3, -1e-3])
B_TIME = 30.0
# True energy slope (% battery per sample), linear in the five energy features.
W_ENERGY = np.array([0.0, 0.0, 2e-6, -5e-9, 0.02])
B_ENERGY = 1e-4


def _features(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random phone states in ENERGY_FEATURES order."""
    return np.column_stack(
        [
            rng.uniform(0.5, 6.0, n) * GB,
            rng.choice([2.0, 3.0, 4.0, 6.0, 8.0], n) * GB,
            rng.uniform(28.0, 42.0, n),
            rng.uniform(5000.0, 20000.0, n),
            rng.uniform(0.004, 0.012, n),
        ]
    )


def _alpha_time(x: np.ndarray) -> np.ndarray:
    return B_TIME + x[..., :4] @ W_TIME


def _alpha_energy(x: np.ndarray) -> np.ndarray:
    return B_ENERGY + x @ W_ENERGY


def _as_dict(x: np.ndarray) -> dict[str, float]:
    return dict(zip(ENERGY_FEATURES, x.tolist(), strict=True))


@pytest.fixture(scope="module")
def boot() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An offline bootstrap dataset with small measurement noise."""
    rng = np.random.default_rng(0)
    x = _features(rng, 300)
    return (
        x,
        _alpha_time(x) + rng.normal(0, 0.2, len(x)),
        _alpha_energy(x) * (1 + rng.normal(0, 0.01, len(x))),
    )


@pytest.fixture
def iprof(boot: tuple[np.ndarray, np.ndarray, np.ndarray]) -> IProf:
    x, t, e = boot
    return IProf(time_slo_ms=3000.0, energy_slo=0.075, max_batch=100_000).fit(x, t, e)


# ------------------------------------------------------------------ cold start
def test_cold_start_predicts_unseen_devices(boot: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    x, t, _ = boot
    reg = SlopeRegressor().fit(x[:, :4], t)
    x_new = _features(np.random.default_rng(1), 50)
    pred = reg.predict(x_new[:, :4], device_model="never seen")
    np.testing.assert_allclose(pred, _alpha_time(x_new), rtol=0.03)
    assert reg.n_features_in_ == 4 and reg.models_ == {}


def test_iprof_cold_decision_uses_both_slos(iprof: IProf) -> None:
    x = _features(np.random.default_rng(2), 1)[0]
    d = iprof.batch_size("Galaxy S42", _as_dict(x))
    assert isinstance(d, BatchDecision) and d.source == "cold"
    assert d.time_bound == pytest.approx(3000.0 / _alpha_time(x), rel=0.03)
    assert d.energy_bound == pytest.approx(0.075 / _alpha_energy(x), rel=0.05)
    assert d.batch_size == int(min(d.time_bound, d.energy_bound))


def test_fresh_iprof_uses_builtin_prior() -> None:
    p = IProf(time_slo_ms=3000.0, prior_time_slope_ms=20.0)
    d = p.batch_size("Pixel 9", {"available_memory": 3 * GB, "temperature": 31.0})
    assert d.batch_size == 150 and d.source == "cold" and d.energy_bound is None
    assert d.predicted_time_ms == pytest.approx(3000.0)


def test_refit_cold_start_learns_from_observed_pairs() -> None:
    """A fresh server (constant prior) learns the feature dependence for unseen device models."""
    rng = np.random.default_rng(3)
    p = IProf(refit_every=0)
    x_test = _features(rng, 20)
    for i, x in enumerate(_features(rng, 200)):
        p.observe(f"model-{i}", _as_dict(x), 100, 100 * float(_alpha_time(x)))
    before = np.array([p.batch_size("unseen", _as_dict(x)).time_bound for x in x_test])
    p.refit_cold_start()
    after = np.array([p.batch_size("unseen", _as_dict(x)).time_bound for x in x_test])
    truth = 3000.0 / _alpha_time(x_test)
    assert np.abs(after / truth - 1).max() < 0.05 < np.abs(before / truth - 1).max()


def test_refit_happens_every_n_observations() -> None:
    p = IProf(refit_every=5).fit_prior()
    cold = p.time_.cold_.coef_.copy()
    x = _features(np.random.default_rng(4), 5)
    for i in range(4):
        p.observe(f"m{i}", _as_dict(x[i]), 10, 10 * float(_alpha_time(x[i])))
    np.testing.assert_array_equal(p.time_.cold_.coef_, cold)
    p.observe("m4", _as_dict(x[4]), 10, 10 * float(_alpha_time(x[4])))
    assert not np.array_equal(p.time_.cold_.coef_, cold)


# --------------------------------------------------------------- personalising
def test_personalisation_converges_then_tracks_throttling(iprof: IProf) -> None:
    """A device 1.6x slower than the cold start predicts; its slope doubles (throttling) at task 30."""
    rng = np.random.default_rng(5)
    x = _features(rng, 1)[0]
    base = 1.6 * float(_alpha_time(x))
    ratios = []
    for k in range(60):
        throttled = k >= 30
        feats = _as_dict(x) | {"temperature": x[2] + (8.0 if throttled else 0.0)}
        d = iprof.batch_size("Odd Phone", feats)
        t = base * (2.0 if throttled else 1.0) * d.batch_size * (1 + rng.normal(0, 0.02))
        iprof.observe("Odd Phone", feats, d.batch_size, t)
        ratios.append(t / 3000.0)
    assert ratios[0] > 1.4  # the cold start is off for this device
    assert max(abs(r - 1) for r in ratios[3:30]) < 0.1  # converged within 3 tasks
    assert ratios[30] > 1.5  # throttling hits
    assert max(abs(r - 1) for r in ratios[33:]) < 0.1  # tracked again within 3 tasks
    assert iprof.time_.n_updates_["Odd Phone"] == 60
    assert iprof.batch_size("Odd Phone", _as_dict(x)).source == "personal"
    assert iprof.batch_size("Other Phone", _as_dict(x)).source == "cold"


def test_personal_models_are_per_device_model(iprof: IProf) -> None:
    x = _as_dict(_features(np.random.default_rng(6), 1)[0])
    before = iprof.batch_size("B", x)
    for _ in range(5):
        iprof.observe("A", x, 100, 100 * 80.0)
    assert iprof.batch_size("A", x).batch_size < before.batch_size
    assert iprof.batch_size("B", x) == before
    assert iprof.device_models() == ["A"]


# --------------------------------------------------------------------- PA rule
def test_sgd_pa1_matches_hand_computed_update() -> None:
    """sklearn's SGDRegressor(pa1) is the PA-I rule θ ← θ + min(C, loss/‖x‖²)·sign(α − xᵀθ)·x."""

    def pa(c: float) -> SGDRegressor:
        return SGDRegressor(
            loss="epsilon_insensitive",
            penalty=None,
            learning_rate="pa1",
            eta0=c,
            epsilon=0.1,
            fit_intercept=False,
            shuffle=False,
        )

    x, y = np.array([[1.0, 2.0]]), np.array([3.0])
    # loss = |0 − 3| − 0.1 = 2.9, ‖x‖² = 5, step = min(C, 0.58)
    np.testing.assert_allclose(pa(0.1).partial_fit(x, y).coef_, [0.1, 0.2])  # capped at C
    reg = pa(1.0).partial_fit(x, y)
    np.testing.assert_allclose(reg.coef_, [0.58, 1.16])  # lands on the ε-tube edge: 2.9
    reg.partial_fit(x, np.array([2.95]))  # inside the tube: passive
    np.testing.assert_allclose(reg.coef_, [0.58, 1.16])
    reg.partial_fit(np.array([[0.0, 1.0]]), np.array([0.0]))  # loss = 1.06, ‖x‖² = 1: step capped at C = 1
    np.testing.assert_allclose(reg.coef_, [0.58, 0.16])


def test_pa1_step_is_sklearns_partial_fit_to_a_few_ulps() -> None:
    """The request path's one-row update must be the estimator's own update, not an approximation.

    Compared to a few ulps of the largest coefficient, not to the bit: sklearn's Cython and numpy's dot
    may round differently (FMA, SIMD width) on another CPU; one machine showed 16 ulps on a coefficient
    near 0. A wrong update (a dropped cap, a sign, the bias left out of ‖x‖²) is off by far more at once.
    """
    rng = np.random.default_rng(5)
    C, eps = 0.3, 0.05
    reg = SGDRegressor(
        loss="epsilon_insensitive",
        penalty=None,
        learning_rate="pa1",
        eta0=C,
        epsilon=eps,
        fit_intercept=False,
        shuffle=False,
    )
    coef = rng.normal(size=6)
    reg.partial_fit(np.zeros((1, 6)), [0.0])  # allocate, then start both from the same θ
    reg.coef_ = coef.copy()
    for _ in range(500):
        x, y = rng.normal(size=6) * rng.uniform(0.1, 5.0), float(rng.normal() * 3)
        reg.partial_fit(x[None], [y])
        pa1_step(coef, x, y, C, eps)
        scale = float(np.abs(reg.coef_).max())  # ulps of a coefficient near 0 are far finer than its error
        np.testing.assert_allclose(coef, reg.coef_, rtol=0, atol=64 * np.spacing(scale))
        coef[:] = reg.coef_  # compare one step at a time: rounding differences must not accumulate


def test_slope_regressor_personal_update_is_pa1_from_cold_start(boot: tuple) -> None:
    x, t, _ = boot
    reg = SlopeRegressor(C=0.1, epsilon=0.1).fit(x[:, :4], t)
    row, alpha = x[:1, :4], 60.0
    z = np.concatenate([[1.0], reg.scaler_.transform(row)[0]])
    theta = np.concatenate([[reg.cold_.intercept_], reg.cold_.coef_]) / reg.y_scale_
    a = alpha / reg.y_scale_
    loss = max(0.0, abs(z @ theta - a) - 0.1 / reg.y_scale_)
    expected = theta + min(0.1, loss / (z @ z)) * np.sign(a - z @ theta) * z
    reg.partial_fit(row, [alpha], device_model="S7")
    np.testing.assert_allclose(reg.models_["S7"].coef_, expected, rtol=1e-12)


# ----------------------------------------------------------------- the bound L
def test_batch_is_min_of_time_and_energy_bounds(boot: tuple) -> None:
    x, t, e = boot
    f = _as_dict(x[0])
    loose_energy = IProf(time_slo_ms=3000.0, energy_slo=10.0, max_batch=10**9).fit(x, t, e)
    d = loose_energy.batch_size("m", f)
    assert d.time_bound < d.energy_bound and d.batch_size == int(d.time_bound)
    tight_energy = IProf(time_slo_ms=3000.0, energy_slo=0.01, max_batch=10**9).fit(x, t, e)
    d = tight_energy.batch_size("m", f)
    assert d.energy_bound < d.time_bound and d.batch_size == int(d.energy_bound)
    assert d.predicted_energy <= 0.01 and d.predicted_time_ms <= 3000.0


def test_batch_is_clamped(boot: tuple) -> None:
    x, t, _ = boot
    f = _as_dict(x[0])
    assert IProf(time_slo_ms=3000.0, max_batch=50).fit(x, t).batch_size("m", f).batch_size == 50
    d = IProf(time_slo_ms=1.0, min_batch=8).fit(x, t).batch_size("m", f)
    assert d.time_bound == 1.0 and d.batch_size == 8  # L = max(1, SLO/α) = 1, then L_min


def test_intercept_is_subtracted(boot: tuple) -> None:
    x, t, _ = boot
    f = _as_dict(x[0])
    p = IProf(time_slo_ms=3000.0, intercept_ms=100.0, max_batch=10**9).fit(x, t)
    alpha = p.time_.predict(x[:1, :4])[0]
    assert p.batch_size("m", f).time_bound == pytest.approx(2900.0 / alpha)
    p.observe("m", f, 50, 100.0 + 50 * 2 * alpha)  # α = (t − t0)/L = 2α
    assert p.time_.pairs_[-1][1] == pytest.approx(2 * alpha)


def test_nonpositive_slope_is_floored() -> None:
    rng = np.random.default_rng(7)
    x = _features(rng, 100)[:, :4]
    y = 1.0 + (x[:, 3] - 5000.0) * -5e-5  # 1 ms at 5 GHz, 0.25 ms at 20 GHz; negative beyond 25 GHz
    reg = SlopeRegressor(alpha_floor_fraction=0.5).fit(x, y)
    assert reg.alpha_floor_ == pytest.approx(0.5 * y.min())
    fast = np.array([[4 * GB, 8 * GB, 30.0, 60000.0]])
    assert reg.predict(fast)[0] == reg.alpha_floor_
    p = IProf(time_slo_ms=3000.0, max_batch=10**9).fit(x, y)
    d = p.batch_size("m", dict(zip(FEATURES, fast[0].tolist(), strict=True)))
    assert d.time_bound == pytest.approx(3000.0 / p.time_.alpha_floor_)
    p.observe("m", {}, 10, -50.0)  # a negative measured slope cannot make α̂ ≤ 0 either
    assert p.batch_size("m", {}).time_bound > 0


def test_missing_features_are_imputed_with_the_mean(iprof: IProf) -> None:
    mean = dict(zip(ENERGY_FEATURES, iprof.energy_.scaler_.mean_.tolist(), strict=True))
    partial = mean | {"temperature": None, "energy_per_cpu_time": float("nan")}
    d_none = iprof.batch_size("m", dict.fromkeys(ENERGY_FEATURES))
    assert iprof.batch_size("m", {}) == d_none
    assert d_none.time_bound == pytest.approx(iprof.batch_size("m", mean).time_bound, rel=1e-12)
    assert iprof.batch_size("m", partial).energy_bound == pytest.approx(d_none.energy_bound, rel=1e-12)
    # a device that can read nothing still gets a personal model that learns (‖[1, 0…]‖² = 1);
    # each step moves α̂ by at most C·y_scale_ (≈ 2.2 ms here), so 60 ms from ≈ 22 ms takes < 25 tasks
    for _ in range(25):
        iprof.observe("blind", {}, 100, 100 * 60.0)
    assert iprof.batch_size("blind", {}).time_bound == pytest.approx(50.0, rel=0.01)
    reg = iprof.time_
    arr = np.array([[np.nan, 4 * GB, np.nan, 12000.0]])
    assert np.isfinite(reg.predict(arr, device_model="blind")).all()


# ----------------------------------------------------------------- persistence
def _probe(p: IProf, rows: np.ndarray, models: list[str]) -> list[BatchDecision]:
    return [p.batch_size(m, _as_dict(x)) for m in models for x in rows]


def test_state_round_trip_is_exact(iprof: IProf) -> None:
    rng = np.random.default_rng(8)
    for i, x in enumerate(_features(rng, 40)):
        iprof.observe(
            f"m{i % 4}", _as_dict(x), 50, 50 * 1.3 * float(_alpha_time(x)), 50 * float(_alpha_energy(x))
        )
    probe = _features(rng, 10)
    models = ["m0", "m1", "m2", "m3", "new"]
    state = json.loads(json.dumps(iprof.state_dict()))
    restored = IProf.from_state(state)
    assert restored.get_params() == iprof.get_params()
    assert _probe(restored, probe, models) == _probe(iprof, probe, models)
    np.testing.assert_array_equal(
        restored.time_.predict(probe[:, :4], device_model="m1"),
        iprof.time_.predict(probe[:, :4], device_model="m1"),
    )
    # and they keep learning identically
    for p in (iprof, restored):
        for x in probe:
            p.observe("m2", _as_dict(x), 64, 64 * 40.0, 64 * 3e-4)
            p.observe("new", _as_dict(x), 64, 64 * 10.0)
        p.refit_cold_start()
    assert _probe(restored, probe, models) == _probe(iprof, probe, models)
    assert json.dumps(restored.state_dict()) == json.dumps(iprof.state_dict())


def test_per_device_model_state(iprof: IProf) -> None:
    x = _features(np.random.default_rng(9), 3)
    for i in range(6):
        iprof.observe(["S7", "S10"][i % 2], _as_dict(x[i % 3]), 80, 80 * 45.0, 80 * 4e-4)
    cold = json.loads(json.dumps(iprof.cold_state()))
    devices = {dm: json.loads(json.dumps(iprof.device_state(dm))) for dm in iprof.device_models()}
    assert devices["S7"]["time"]["n_updates"] == 3
    fresh = IProf(**iprof.get_params()).load_cold_state(cold)
    assert fresh.batch_size("S7", _as_dict(x[0])).source == "cold"
    for dm, st in devices.items():
        fresh.load_device_state(dm, st)
    assert _probe(fresh, x, ["S7", "S10", "other"]) == _probe(iprof, x, ["S7", "S10", "other"])


def test_load_bootstrap_csv_and_npz(tmp_path, boot: tuple) -> None:
    x, t, e = boot
    ref = IProf(energy_slo=0.075).fit(x, t, e)
    header = ["device_model", *ENERGY_FEATURES, "time_slope_ms", "energy_slope"]
    with (tmp_path / "boot.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for i, row in enumerate(x):
            w.writerow([f"dev{i % 7}", *map(repr, row.tolist()), repr(float(t[i])), repr(float(e[i]))])
    np.savez(
        tmp_path / "boot.npz",
        device_model=np.array([f"dev{i % 7}" for i in range(len(x))]),
        time_slope_ms=t,
        energy_slope=e,
        **{name: x[:, j] for j, name in enumerate(ENERGY_FEATURES)},
    )
    probe = _features(np.random.default_rng(10), 5)
    for name in ("boot.csv", "boot.npz"):
        loaded = IProf(energy_slo=0.075).load_bootstrap(tmp_path / name)
        assert _probe(loaded, probe, ["x"]) == _probe(ref, probe, ["x"])


# ---------------------------------------------------------- estimator contract
def test_estimator_contract(boot: tuple) -> None:
    x, t, _ = boot
    reg = SlopeRegressor(C=0.5, epsilon=0.2)
    assert reg.get_params() == {
        "C": 0.5,
        "epsilon": 0.2,
        "alpha_floor_fraction": 0.1,
        "scale_target": True,
        "max_pairs": 10_000,
        "personal_init": "cold",
        "z_clip": None,
        "scale_floor": None,
    }
    with pytest.raises(NotFittedError):
        reg.predict(x[:2, :4])
    assert reg.fit(x[:, :4], t) is reg
    assert reg.partial_fit(x[:1, :4], t[:1], device_model="a") is reg
    twin = clone(reg)
    assert twin.get_params() == reg.get_params() and not hasattr(twin, "models_")
    assert reg.score(x[:, :4], t) > 0.99

    p = IProf(time_slo_ms=2000.0, energy_slo=0.05, C=0.2)
    params = p.get_params()
    assert params["time_slo_ms"] == 2000.0 and params["energy_slo"] == 0.05 and params["C"] == 0.2
    assert {"min_batch", "max_batch", "time_epsilon", "energy_epsilon", "intercept_ms"} <= params.keys()
    p.fit(x, t)
    twin = clone(p)
    assert twin.get_params() == params and not hasattr(twin, "time_")
    assert p.set_params(max_batch=7).batch_size("m", _as_dict(x[0])).batch_size == 7


def test_invalid_settings_fail_at_fit(boot: tuple) -> None:
    x, t, _ = boot
    p = IProf(min_batch=10, max_batch=5)  # construction never validates
    with pytest.raises(ValueError, match="min_batch"):
        p.fit(x, t)
    with pytest.raises(ValueError, match="positive slope"):
        SlopeRegressor().fit(x[:, :4], -np.abs(t))


def test_observe_one_fast_path_is_the_general_path_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A known device model's update skips the 2-D arrays of ``_partial_fit_z``, not one of its float64
    operations: both paths leave every coefficient, sum, pair and floor identical."""
    import copy
    import random

    def general(self: SlopeRegressor, values: list, alpha: float, device_model: str) -> SlopeRegressor:
        return self._partial_fit_z(np.array([self._standardise_one(values)]), np.array([alpha]), device_model)

    rng = random.Random(3)
    fast = IProf()
    fast.batch_size("m0", {"total_memory": 4e9, "available_memory": 1e9})
    slow = copy.deepcopy(fast)
    for _ in range(1000):
        model = f"m{rng.randint(0, 5)}"
        features = {"total_memory": rng.choice([2e9, 8e9]), "available_memory": rng.uniform(1e8, 2e9)}
        size, time_ms = rng.randint(1, 64), rng.uniform(1, 5000)
        energy = rng.choice([None, rng.random() / 10])
        fast.observe(model, features, size, time_ms, energy)
        with monkeypatch.context() as patch:
            patch.setattr(SlopeRegressor, "observe_one", general)
            slow.observe(model, features, size, time_ms, energy)
    for a, b in ((fast.time_, slow.time_), (fast.energy_, slow.energy_)):
        assert a._fast_personal == b._fast_personal and list(a.pairs_) == list(b.pairs_)
        assert np.array_equal(a._gram, b._gram) and np.array_equal(a._moment, b._moment)
        assert a.min_alpha_ == b.min_alpha_ and a.n_updates_ == b.n_updates_
    assert fast.cold_state() == slow.cold_state()
    assert all(fast.device_state(m) == slow.device_state(m) for m in fast.device_models())
