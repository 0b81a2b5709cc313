"""Device catalogue, hidden cost model, bootstrap collection and the FedScale trace loader."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from profiler import IProf
from sim.bootstrap import collect_bootstrap, read_bootstrap_rows, write_bootstrap
from sim.cost import DeviceUnit
from sim.devices import load_catalog, load_fedscale_trace, parse_cores, split_roles


def test_catalogue_has_disjoint_bootstrap_and_test_devices_with_7x_spread() -> None:
    specs = load_catalog()
    boot, test = split_roles(specs)
    assert len(boot) >= 15 and len(test) >= 20 and len(specs) >= 35
    assert not {s.name for s in boot} & {s.name for s in test}
    speeds = [s.ms_per_sample for s in test]
    assert max(speeds) / min(speeds) >= 7
    s6, s10 = (next(s for s in specs if s.name == n) for n in ("Galaxy S6", "Galaxy S10"))
    assert s6.ms_per_sample / s10.ms_per_sample == pytest.approx(7.0)
    assert parse_cores("1x2840+3x2420+4x1780") == (2840.0,) + (2420.0,) * 3 + (1780.0,) * 4


def test_cost_model_is_deterministic_given_the_generator() -> None:
    spec = load_catalog()[0]

    def trace(seed: int) -> list[tuple[float, float, float | None]]:
        unit = DeviceUnit(spec, np.random.default_rng(seed))
        out = []
        for _ in range(5):
            f = unit.features()
            cost = unit.run_task(200)
            out.append((cost.time_ms, cost.energy, f["temperature"]))
            unit.idle(3.0)
        return out

    assert trace(1) == trace(1) != trace(2)


def test_sustained_load_heats_and_slows_then_idle_cools() -> None:
    spec = next(s for s in load_catalog() if s.name == "Galaxy S6")
    unit = DeviceUnit(spec, np.random.default_rng(0))
    cool_slope = unit.true_slope_ms()
    t_cool = unit.features()["temperature"]
    for _ in range(30):
        unit.run_task(300)
    assert unit.true_slope_ms() > 1.1 * cool_slope  # throttled
    assert unit.features()["temperature"] > t_cool + 3  # the battery sensor shows part of it
    unit.idle(3600)
    assert unit.core_c == pytest.approx(unit.ambient_c, abs=0.5)


def test_time_grows_linearly_with_batch_and_energy_follows_power() -> None:
    spec = next(s for s in load_catalog() if s.name == "Pixel 3")
    rng = np.random.default_rng(0)
    small = np.median([DeviceUnit(spec, rng).run_task(100).time_ms for _ in range(30)])
    large = np.median([DeviceUnit(spec, rng).run_task(400).time_ms for _ in range(30)])
    assert (large - spec.overhead_ms) / (small - spec.overhead_ms) == pytest.approx(4.0, rel=0.15)
    cost = DeviceUnit(spec, rng).run_task(400)
    expected = spec.active_power_w * cost.cpu_seconds / (spec.battery_mah * 3.85 * 3.6) * 100
    assert expected * 0.8 < cost.energy < expected * 1.6  # health, unit power, leakage, noise


def test_bootstrap_grows_until_twice_the_slo_and_trains_the_cold_start(tmp_path) -> None:
    boot, _ = split_roles(load_catalog())
    rows = collect_bootstrap(boot[:4], time_slo_ms=3000.0, rng=np.random.default_rng(0), runs_per_device=1)
    for name in {r["device_model"] for r in rows}:
        mine = [r for r in rows if r["device_model"] == name]
        sizes = [r["batch_size"] for r in mine]
        assert sizes == sorted(sizes) and mine[-1]["time_ms"] >= 6000.0 > mine[-2]["time_ms"]
    path = write_bootstrap(rows, tmp_path / "boot.csv")
    assert len(read_bootstrap_rows(path)) == len(rows)
    profiler = IProf(time_slo_ms=3000.0).load_bootstrap(path)
    assert profiler.batch_size("unseen", rows[0]).source == "cold"


def test_fedscale_trace_formats(tmp_path) -> None:
    mapping = {
        "7": {"computation": 12.5, "communication": 800.0},
        "9": {"computation": 3.0, "communication": 50},
    }
    (tmp_path / "cap.json").write_text(json.dumps(mapping))
    (tmp_path / "cap.pkl").write_bytes(pickle.dumps(mapping))
    (tmp_path / "cap.trace.csv").write_text("client_id,computation,communication\n7,12.5,800\n9,3.0,50\n")
    for name in ("cap.json", "cap.pkl", "cap.trace.csv"):
        specs = load_catalog(tmp_path / name)
        assert [(s.name, s.ms_per_sample, s.kbps) for s in specs] == [
            ("fedscale-7", 12.5, 800.0),
            ("fedscale-9", 3.0, 50.0),
        ]
    unit = DeviceUnit(specs[0], np.random.default_rng(0))
    assert unit.features()["total_memory"] is None and unit.run_task(10).time_ms > 0
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"1": np.float64(2.0)}))
    with pytest.raises(pickle.UnpicklingError):
        load_fedscale_trace(tmp_path / "evil.pkl")
