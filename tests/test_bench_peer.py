"""`python -m lab run peer`: the shared workload, the censoring rules, and short real runs of both sides."""

from __future__ import annotations

import json

import numpy as np
import psutil
import pytest

from lab.bench.peer import parse_arm
from lab.bench.peer_fleet import FleetArm
from lab.bench.peer_flower_run import FlowerArm, flower_python, run_flower_arm
from lab.bench.peer_report import time_to, work_to
from lab.bench.peer_workload import BUNDLE, PER_DEVICE, init_params, params_sha256, write_workload


def test_workload_is_deterministic_and_the_same_for_both_systems(tmp_path):
    a, b = write_workload(tmp_path / "a", 5), write_workload(tmp_path / "b", 5)
    assert a.delays_ms == b.delays_ms == tuple(np.linspace(0.5, 3.5, 5))
    assert [d for _, d in a.assignment()] == list(a.delays_ms)  # Fleet's and Flower's device i alike
    seen: list[np.ndarray] = []
    for (path_a, _), (path_b, _) in zip(a.assignment(), b.assignment(), strict=True):
        with np.load(path_a) as x, np.load(path_b) as y:
            assert np.array_equal(x["x"], y["x"]) and np.array_equal(x["y"], y["y"])
            assert len(x["y"]) == PER_DEVICE
            seen.append(x["x"].reshape(PER_DEVICE, -1))
    assert len(np.unique(np.concatenate(seen), axis=0)) == 5 * PER_DEVICE  # disjoint shards
    with np.load(a.test) as test:
        assert len(test["y"]) == 1000
    # both sides start from the bundle Fleet's coordinator serves as version 0
    assert (a.root / "init.bin").read_bytes() == (BUNDLE / "init.bin").read_bytes()
    assert a.init_sha256 == params_sha256(init_params())
    assert json.loads((a.root / "workload.json").read_text())["labels"] == [list(x) for x in a.labels]


def test_arm_specs():
    assert parse_arm("fleet") == FleetArm("fleet")
    assert parse_arm("fleet:x2").rate_factor == 2.0
    changed = parse_arm("fleet:serving_average=0+k=10")
    assert changed.settings(0.6) == {"strategy__serving_average": "0", "strategy__k": "10"}
    assert parse_arm("fleet:fedbuff:0.4:k10") == FleetArm("fleet:fedbuff:0.4:k10", "fedbuff", 0.4, 10)
    assert FleetArm("fleet:x0.5", rate_factor=0.5).settings(0.5) == {"learning_rate": 0.25}
    assert FleetArm("fleet").settings(0.5) == {}  # the default arm sets nothing: untuned
    assert parse_arm("flower:e2:0.05") == FlowerArm("flower:e2:0.05", 2, 0.05)
    assert parse_arm("flower-deployment:e1:0.1").mode == "deployment"
    for bad in ("fleet:fedbuff", "flower:2:0.1", "flwr", "fleet:x"):
        with pytest.raises(ValueError):
            parse_arm(bad)


def test_a_missed_target_is_censored_at_the_run_length():
    run = {"duration_s": 30.0, "curve": [(0.0, 0.1), (10.0, 0.85), (20.0, 0.91), (31.0, 0.99)]}
    run["work_at"] = list(np.arange(1, 301) / 10)  # one gradient every 0.1 s
    assert time_to(run, 0.8) == (10.0, False) and work_to(run, 0.8) == (100, False)
    assert time_to(run, 0.9) == (20.0, False)
    assert time_to(run, 0.95) == (30.0, True)  # the 0.99 came after the cap: not counted
    assert work_to(run, 0.95) == (300, True)


def _no_leftovers(marker: str) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if marker in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_quick_fleet_side(tmp_path, monkeypatch):
    from lab.bench import run_report
    from server.settings import Settings

    monkeypatch.setenv("FLEET_PEER_FLOWER", "0")
    monkeypatch.delenv("FLEET_PEER_ARMS", raising=False)
    payload = run_report("peer", quick=True, out_dir=tmp_path)
    for suffix in ("md", "json", "png"):
        assert (tmp_path / f"peer-flower-quick.{suffix}").stat().st_size > 0
    (run,) = payload["runs"]
    assert run["strategy"] == Settings.model_fields["strategy"].default.name  # the default arm, untuned
    assert run["settings"] == {} and run["init_matches_workload"]
    curve = run["curve"]
    assert len(curve) >= 3 and max(c[1] for c in curve[1:]) > curve[0][1] + 0.1  # it learned
    delays = payload["workload"]["delays_ms"]
    for device, fastest_ms in run["min_task_ms_by_device"].items():  # the delay is on top of compute
        assert fastest_ms >= 100 * delays[int(device)]
    row = payload["summary"]["arms"]["fleet"]
    assert row["time_to_95_censored"] and row["time_to_95_s"] == pytest.approx(run["duration_s"])
    assert "≥ " in (tmp_path / "peer-flower-quick.md").read_text()
    assert "Flower skipped" in payload["summary"]["notes"][0]


@pytest.mark.slow
@pytest.mark.skipif(flower_python() is None, reason="no Flower venv (python -m lab run peer creates it)")
def test_quick_flower_side(tmp_path):
    workload = write_workload(tmp_path / "workload", 3)
    workdir = tmp_path / "flower"
    result = run_flower_arm(
        workload, FlowerArm("flower:e1:0.1", 1, 0.1), workdir, python=flower_python(), cap_s=8, stop_at=0.99
    )
    # Flower's torch module, loaded from the workload's init.bin, flattens back to Fleet's version 0
    assert result["init_matches_workload"]
    curve = result["curve"]
    assert curve[0][3] == 0 and len(curve) >= 3 and max(c[1] for c in curve[1:]) > curve[0][1]
    assert time_to(result, 0.99)[1] and result["rounds"] >= 2
    assert result["work_at"] and result["work_unit"] == "local steps"
    assert not _no_leftovers(str(workdir)) and not _no_leftovers(str(workload.root))
