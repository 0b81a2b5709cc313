"""MAUI's global profiler, the round-robin dispatcher, and I-Prof's contract on the simulated fleet."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from profiler import IProf
from profiler.dispatch import RoundRobinDispatcher, with_maui_baseline
from profiler.maui import MauiProfiler
from sim.bootstrap import collect_bootstrap
from sim.cost import DeviceUnit
from sim.devices import load_catalog, split_roles

FEATURES = {"available_memory": 1e9, "total_memory": 4e9, "temperature": 30.0, "cpu_freq_sum": 8000.0}


def test_maui_is_least_squares_through_the_origin_and_updates_exactly() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(10, 500, 50).astype(float)
    times = 7.0 * sizes + rng.normal(0, 30, 50)
    maui = MauiProfiler(time_slo_ms=3000.0).fit(sizes[:30], times[:30])
    for size, time_ms in zip(sizes[30:], times[30:], strict=True):
        maui.observe("any", {}, int(size), float(time_ms))
    theta = np.linalg.lstsq(sizes[:, None], times, rcond=None)[0][0]
    assert maui.time_slope_ == pytest.approx(theta)
    decision = maui.batch_size("Galaxy S7", FEATURES)
    assert decision.batch_size == int(3000.0 / theta) and decision.source == "maui"
    assert maui.batch_size("Pixel 6", {}) == decision  # no device, no features
    assert clone(maui).get_params() == maui.get_params()


def test_maui_energy_bound_and_clamp() -> None:
    maui = MauiProfiler(time_slo_ms=3000.0, energy_slo=0.075, max_batch=100).fit([100.0], [1000.0], [0.05])
    assert maui.batch_size("d", {}).batch_size == 100  # bound 150 by energy, clamped to 100
    unclamped = MauiProfiler(time_slo_ms=3000.0, energy_slo=0.075).fit([100.0], [1000.0], [0.05])
    assert unclamped.batch_size("d", {}).batch_size == 150
    with pytest.raises(ValueError):
        MauiProfiler(min_batch=5, max_batch=2).fit([1.0], [1.0])


class _Fixed:
    def __init__(self, size: int) -> None:
        self.size, self.seen = size, []

    def batch_size(self, device_model: str, features: dict) -> int:
        return self.size

    def observe(self, *args: object) -> None:
        self.seen.append(args)


def test_dispatcher_alternates_each_device_and_feeds_everyone() -> None:
    a, b = _Fixed(1), _Fixed(2)
    dispatcher = RoundRobinDispatcher([a, b], ["iprof", "maui"])
    got = {d: [dispatcher.batch_size(d, {}) for _ in range(4)] for d in ("x", "y")}
    assert got == {"x": [1, 2, 1, 2], "y": [1, 2, 1, 2]}
    dispatcher.observe("x", {}, 10, 100.0, None)
    assert len(a.seen) == len(b.seen) == 1


def test_with_maui_baseline_persists_iprof_state() -> None:
    iprof = IProf(time_slo_ms=3000.0).fit_prior()
    dispatcher = with_maui_baseline(iprof)
    assert dispatcher.time_slo_ms == 3000.0 and dispatcher.names == ["iprof", "maui"]
    dispatcher.batch_size("d", FEATURES)
    dispatcher.observe("d", FEATURES, 100, 500.0, 0.01)
    assert dispatcher.device_models() == ["d"] and dispatcher.device_state("d")["time"]["n_updates"] == 1
    assert dispatcher.profilers[1].n_observed_ == 1


@pytest.fixture(scope="module")
def boot_rows() -> list[dict]:
    boot, _ = split_roles(load_catalog())
    return collect_bootstrap(boot, time_slo_ms=3000.0, rng=np.random.default_rng(0), runs_per_device=1)


def _fit(rows: list[dict], **params: object) -> IProf:
    iprof = IProf(time_slo_ms=3000.0, max_batch=20_000, relative_memory=True, C=1.0, **params)
    return iprof.fit(rows, [r["time_slope_ms"] for r in rows])


@pytest.mark.parametrize("personal_init", ["cold", "level"])
def test_iprof_personalises_on_a_device_that_heats_up(boot_rows: list[dict], personal_init: str) -> None:
    _, test = split_roles(load_catalog())
    unit = DeviceUnit(next(s for s in test if s.name == "Moto G5"), np.random.default_rng(3))
    iprof = _fit(boot_rows, personal_init=personal_init)
    errors = []
    for _ in range(25):  # back to back: the device throttles and its slope rises
        features = unit.features()
        decision = iprof.batch_size("Moto G5", features)
        cost = unit.run_task(decision.batch_size)
        iprof.observe("Moto G5", features, decision.batch_size, cost.time_ms)
        errors.append(abs(cost.time_ms - 3000.0) / 3000.0)
        unit.idle(1.0)
    assert unit.true_slope_ms() > 1.1 * unit.spec.ms_per_sample * unit.unit_factor  # it did heat up
    assert np.median(errors[5:]) < 0.15 and max(errors[5:]) < 0.5


def test_relative_memory_survives_state_round_trip(boot_rows: list[dict]) -> None:
    iprof = _fit(boot_rows)
    iprof.observe("d", boot_rows[3], 200, 2500.0)
    restored = IProf.from_state(iprof.state_dict())
    assert restored.relative_memory is True
    assert restored.batch_size("d", boot_rows[7]) == iprof.batch_size("d", boot_rows[7])


def test_level_init_starts_from_the_cold_prediction(boot_rows: list[dict]) -> None:
    iprof = _fit(boot_rows, personal_init="level")
    features = boot_rows[10]
    cold = iprof.batch_size("new", features)
    iprof.observe("new", features, cold.batch_size, cold.predicted_time_ms)  # exactly as predicted
    coef = iprof.time_.device_state("new")["coef"]
    assert coef[1:] == [0.0] * (len(coef) - 1)  # no between-phone sensitivities carried over
    assert iprof.batch_size("new", boot_rows[11]).time_bound == pytest.approx(cold.time_bound, rel=1e-6)
    with pytest.raises(ValueError, match="personal_init"):
        _fit(boot_rows, personal_init="bogus")


def test_z_clip_bounds_the_effect_of_out_of_range_features(boot_rows: list[dict]) -> None:
    iprof = _fit(boot_rows, z_clip=3.0)
    scaler = iprof.time_.scaler_
    hot = dict(boot_rows[0], temperature=float(scaler.mean_[2] + 50 * scaler.scale_[2]))
    edge = dict(boot_rows[0], temperature=float(scaler.mean_[2] + 3 * scaler.scale_[2]))
    assert iprof.batch_size("x", hot).time_bound == pytest.approx(iprof.batch_size("x", edge).time_bound)
    unclipped = _fit(boot_rows)
    assert unclipped.batch_size("x", hot).time_bound != pytest.approx(
        unclipped.batch_size("x", edge).time_bound
    )


def test_scale_floor_keeps_a_near_constant_feature_from_blowing_up() -> None:
    rng = np.random.default_rng(0)
    rows = [
        {"available_memory": 2e9 + rng.normal(0, 1e6), "total_memory": 4e9, "temperature": 30.0,
         "cpu_freq_sum": float(f)}
        for f in rng.choice([4000.0, 8000.0, 12000.0], 60)
    ]  # fmt: skip
    slopes = [40000.0 / r["cpu_freq_sum"] for r in rows]
    floored = IProf(scale_floor=0.05).fit(rows, slopes)
    assert floored.time_.scaler_.scale_[0] == pytest.approx(0.05 * 2e9, rel=1e-3)
    raw = IProf().fit(rows, slopes)
    assert raw.time_.scaler_.scale_[0] < 2e6  # 1 MB of spread: a 100 MB swing would be 50 σ
