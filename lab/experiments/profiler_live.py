"""Live I-Prof vs MAUI: a real coordinator on loopback and real worker processes on this machine.

1. Bootstrap: on training configurations (CPU set, threads; a competing load on one), grow the batch
   until the measured time reaches 2x the scaled SLO; the rows become ``FLEET_PROFILER_BOOTSTRAP``.
2. Serve: ``fleet serve`` with ``FLEET_PROFILER_BASELINE=maui`` (round-robin dispatcher, I-Prof first
   for each device model), the scaled SLO and ε = 1% of the bootstrap's mean slope.
3. Run: test workers (different CPU sets and thread counts; two competing loads whose duty cycles vary
   over time) take tasks through the REST API until the deadline. A task's profiler is its request's
   parity (even: I-Prof, odd: MAUI), which the dispatcher guarantees per device model.

Every timing comes from ``time.perf_counter`` around onnxruntime in the worker; nothing is modelled
except temperature and energy (see tests/support/live_device.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleet.process import ENROLL, ServerProcess
from lab.contract import Plan
from lab.experiments.profiler_sim import EPSILON_FRACTION
from profiler.defaults import TUNED_PARAMS
from sim.bootstrap import write_bootstrap
from sim.devices import split_roles

__all__ = ["run_live"]

# (cores, threads) of the test devices, the most heterogeneous first (a plan takes a prefix)
TEST_SETUPS: list[tuple[list[int], int]] = [([0], 1), ([0, 1], 2), ([1], 2), ([1], 1), ([0, 1], 1), ([0], 2)]
BOOT_SETUPS: list[tuple[list[int], int, bool]] = [([0], 1, False), ([0, 1], 2, False), ([1], 1, True)]


@dataclass(frozen=True)
class LivePlan:
    """The live comparison's settings (a field of profiler-time's and profiler-energy's plans)."""

    duration_s: float = 150.0
    test_setups: int = len(TEST_SETUPS)  # a prefix of TEST_SETUPS
    boot_setups: int = len(BOOT_SETUPS)  # a prefix of BOOT_SETUPS
    growth: float = 1.25  # the bootstrap's batch growth per step
    start_batch: int = 64
    shared: bool = True  # also run the workers sharing cores


# quick: a loaded machine still serves both profilers in 15 s
LIVE_QUICK = LivePlan(
    duration_s=15.0, test_setups=3, boot_setups=1, growth=1.6, start_batch=256, shared=False
)
LIVE_FULL = LivePlan()


@dataclass(frozen=True, kw_only=True)
class ProfilerPlan(Plan):
    """profiler-time's and profiler-energy's plan: simulated seeds and requests, then the live pair."""

    seeds: int = 5  # simulation seeds from --seed on
    requests_per_device: int = 28
    fast_device_tasks: int = 20
    live: LivePlan = LIVE_FULL


PROFILER_FULL = ProfilerPlan()
PROFILER_QUICK = ProfilerPlan(
    quick=True, seeds=1, requests_per_device=6, fast_device_tasks=6, live=LIVE_QUICK
)


def _child(role: str, cfg: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.live_device", role, json.dumps(cfg)],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def _loads(deadline: float, log: Path) -> list[subprocess.Popen[bytes]]:
    return [
        _child("load", {"core": 0, "deadline": deadline, "period_s": 40.0, "phase": 0.0}, log),
        _child("load", {"core": 1, "deadline": deadline, "period_s": 27.0, "phase": 2.0}, log),
    ]


def _bootstrap(
    work: Path, shards: list[Path], kind: str, slo: float, plan: LivePlan, seed: int
) -> list[dict[str, Any]]:
    from sim.devices import load_catalog

    boot_specs, _ = split_roles(load_catalog())
    rows: list[dict[str, Any]] = []
    setups = BOOT_SETUPS[: plan.boot_setups]
    for i, (cores, threads, loaded) in enumerate(setups):
        out = work / f"boot_{i}.jsonl"
        cfg = {
            "cores": cores,
            "threads": threads,
            "catalog_device": boot_specs[i].name,
            "device_model": f"boot-{i}",
            "data": str(shards[i % len(shards)]),
            "seed": seed + i,
            "out": str(out),
            "time_slo_ms": slo if kind == "time" else 0.0,
            "energy_slo": slo if kind == "energy" else None,
            "growth": plan.growth,
            "start_batch": plan.start_batch,
        }
        loads = _loads(time.time() + 120, work / "load.log") if loaded else []
        try:
            _child("bootstrap", cfg, work / "boot.log").wait(timeout=120)
        finally:
            for p in loads:
                p.kill()
                p.wait()
        rows.extend(_read_jsonl(out))
    return rows


def run_live(
    *,
    kind: str,
    slo: float,
    plan: LivePlan = LIVE_FULL,
    seed: int = 0,
    exclusive_cores: bool = True,
    duration: float | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Run the live comparison; ``slo`` is ms (time) or % battery (energy). Returns records and facts.

    ``exclusive_cores``: a worker computes only while it holds its cores (one phone per core at a
    time, see tests/support/live_device.py); False lets workers on a core slow each other down.
    """
    from sim.data import write_shards
    from sim.devices import load_catalog

    duration = duration or plan.duration_s
    setups = TEST_SETUPS[: plan.test_setups]
    _, test_specs = split_roles(load_catalog())
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        work = Path(tmp)
        shards, _ = write_shards(work / "data", devices=len(setups), partition="iid", seed=seed)
        load_before = os.getloadavg()
        t_start = time.time()
        boot_rows = _bootstrap(work, shards, kind, slo, plan, seed)
        boot_path = write_bootstrap(boot_rows, work / "bootstrap.csv")
        key = "time_slope_ms" if kind == "time" else "energy_slope"
        epsilon = EPSILON_FRACTION * float(np.mean([r[key] for r in boot_rows]))
        params = {**TUNED_PARAMS, ("time_epsilon" if kind == "time" else "energy_epsilon"): epsilon}
        settings: dict[str, object] = {
            "time_slo_ms": slo if kind == "time" else 600_000.0,
            "max_batch": 20000,
            "profiler_bootstrap": boot_path,
            "profiler_baseline": "maui",
            "profiler_params": json.dumps(params),
        }
        if kind == "energy":
            settings["energy_slo"] = slo
        children: list[subprocess.Popen[bytes]] = []
        with ServerProcess(work / "server", **settings) as server:
            try:
                deadline = time.time() + duration
                children += _loads(deadline, work / "load.log")
                for i, (cores, threads) in enumerate(setups):
                    cfg = {
                        "url": server.url,
                        "enrollment_key": ENROLL,
                        "device_model": f"live-{i}-{test_specs[i].name}",
                        "catalog_device": test_specs[i].name,
                        "data": str(shards[i]),
                        "cores": cores,
                        "threads": threads,
                        "seed": seed * 100 + i,
                        "deadline": deadline,
                        "out": str(work / f"worker_{i}.jsonl"),
                        "core_locks": [str(work / f"core_{c}.lock") for c in cores]
                        if exclusive_cores
                        else [],
                    }
                    children.append(_child("worker", cfg, work / "workers.log"))
                for p in children:
                    p.wait(timeout=duration + 90)
                overview = server.admin("/v1/admin/profiler").json()
            finally:
                for p in children:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        records, rejected, errors = [], 0, 0
        for i, (cores, threads) in enumerate(setups):
            for row in _read_jsonl(work / f"worker_{i}.jsonl"):
                rejected += "rejected" in row
                errors += "error" in row
                if "batch_size" in row:
                    row.update(
                        device=f"live-{i}",
                        request=row["index"],
                        profiler="iprof" if row["index"] % 2 == 0 else "maui",
                        cores=cores,
                        threads=threads,
                    )
                    records.append(row)
        return {
            "records": records,
            "bootstrap_rows": len(boot_rows),
            "epsilon": epsilon,
            "rejected": rejected,
            "errors": errors,
            "duration_s": duration,
            "wall_s": time.time() - t_start,
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "setups": [{"cores": c, "threads": t} for c, t in setups],
            "exclusive_cores": exclusive_cores,
            "api_overview": overview,
        }


def run_live_pair(
    kind: str, slo: float, scale: float, *, plan: LivePlan, seed: int, label: str
) -> dict[str, Any]:
    """Both live set-ups, one worker per core at a time and (full runs) workers sharing cores: their
    deviation stats, the summary keys they add, their plot panels and their raw records."""
    from lab.experiments.profiler_report import deviation_stats, live_breakdown

    live = run_live(kind=kind, slo=slo, plan=plan, seed=seed)
    stats = deviation_stats(live["records"], kind, slo, scale)
    shared = (
        run_live(kind=kind, slo=slo, plan=plan, seed=seed, exclusive_cores=False) if plan.shared else None
    )
    shared_stats = deviation_stats(shared["records"], kind, slo, scale) if shared else {}
    summary = {
        "live_iprof_p90_fraction": stats.get("iprof", {}).get("p90_fraction_of_slo"),
        "live_maui_p90_fraction": stats.get("maui", {}).get("p90_fraction_of_slo"),
        "live_tasks_per_profiler": {k: v["tasks"] for k, v in stats.items()},
        "live_over_slo_share": {k: v["over_slo_share"] for k, v in stats.items()},
        "live_shared_over_slo_share": {k: v["over_slo_share"] for k, v in shared_stats.items()},
        "live_breakdown": live_breakdown(live["records"], kind, slo),
        "live_shared_iprof_p90_fraction": shared_stats.get("iprof", {}).get("p90_fraction_of_slo"),
        "live_shared_maui_p90_fraction": shared_stats.get("maui", {}).get("p90_fraction_of_slo"),
        "live_shared_tasks_per_profiler": {k: v["tasks"] for k, v in shared_stats.items()},
        "live_shared_loadavg_before_after": [shared["loadavg_before"], shared["loadavg_after"]]
        if shared
        else None,
        "live_loadavg_before_after": [live["loadavg_before"], live["loadavg_after"]],
    }
    modes = {f"live, one worker per core at a time ({label})": (live["records"], slo)}
    if shared:
        modes[f"live, workers sharing cores ({label})"] = (shared["records"], slo)
    details = {
        "live": {**live, "stats": stats},
        "live_shared": {**shared, "stats": shared_stats} if shared else None,
    }
    return {"live": live, "stats": stats, "summary": summary, "modes": modes, "details": details}
