"""One fleet simulation from a handful of knobs, on either gradient backend: what `fleet simulate` and the
Ray benchmark (lab/bench/ray_sim.py) run, so that the command and the measured figures are the same code.

The fleet: non-IID MNIST (two sorted-label shards per device), devices whose speeds are drawn from the
device catalogue (sim/device_catalog.csv: 12x spread from a Galaxy J5 to a Pixel 6) or the speed classes,
sessions and churn from ``FleetTiming``. The run stops after a gradient budget.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import numpy as np

from sim.backends import make_backend


@dataclass(frozen=True)
class Scenario:
    """A simulation's knobs (times in virtual seconds)."""

    devices: int = 1_000
    gradients: int = 2_000
    model: str = "mnist_cnn"
    strategy: str = "adasgd"
    learning_rate: float = 0.1
    batch: int = 100
    seed: int = 0
    mean_online: float = 600.0
    mean_offline: float = 900.0
    churn: float = 0.05
    heterogeneity: str = "catalog"  # "catalog" (sim/device_catalog.csv) or "classes" (sim/population.py)
    eval_every: int = 0  # gradients between evaluations; 0: only before and after the run


@cache
def workbench(model: str) -> Any:
    """The MNIST workbench for a built-in model, one per process (ONNX sessions and data load once;
    the lab's experiments share the CNN one)."""
    from models.manifest import builtin
    from sim.controlled import Workbench
    from sim.data import load_mnist

    train, test = load_mnist(seed=0)
    return Workbench(builtin(model), train, test)


def catalog_speeds(count: int, flops_per_sample: float, rng: np.random.Generator) -> list[float]:
    """GFLOP/s per device such that a task costs the catalogue's ``ms_per_sample`` of a model drawn
    uniformly from it (the simulator's timing turns GFLOP/s back into seconds)."""
    from sim.devices import load_catalog

    ms = np.array([spec.ms_per_sample for spec in load_catalog()])
    drawn = rng.choice(ms, size=count)
    return [float(flops_per_sample / (m * 1e-3) / 1e9) for m in drawn]


def build(scenario: Scenario, bench: Any, backend: Any) -> Any:
    """The ``FleetSimulator`` of ``scenario`` (enrolling its devices: this takes a while at 100,000)."""
    from server.strategies import make_strategy
    from sim.fleet import FleetSimulator
    from sim.population import FleetTiming

    s = scenario
    timing = FleetTiming(mean_online=s.mean_online, mean_offline=s.mean_offline, churn=s.churn)
    order = np.argsort(bench.train.y, kind="stable")
    shards = np.array_split(order, 200)

    def shard_for(rng: np.random.Generator) -> np.ndarray:
        return np.concatenate([shards[i] for i in rng.choice(200, 2, replace=False)])

    speeds = None
    if s.heterogeneity == "catalog":  # newcomers (churn) take the next speeds, cyclically
        speeds = catalog_speeds(2 * s.devices, timing.flops_per_sample, np.random.default_rng([s.seed, 19]))
    elif s.heterogeneity != "classes":
        raise ValueError(f"heterogeneity is 'catalog' or 'classes', not {s.heterogeneity!r}")
    return FleetSimulator(
        bench,
        lambda: make_strategy(s.strategy, learning_rate=s.learning_rate),
        devices=s.devices,
        shard_for=shard_for,
        seed=s.seed,
        timing=timing,
        batch=s.batch,
        evaluate=True,
        speeds=speeds,
        eval_every_gradients=s.eval_every or 10**12,
        backend=backend,
        draw_at_grant=True,  # the same draws whatever the backend: Ray and local give the same run
    )


def run_scenario(
    scenario: Scenario,
    *,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    chunk: int = 8,
) -> dict[str, Any]:
    """Run ``scenario`` on ``backend`` and return its outcome and where the wall time went.

    ``overhead`` is the share of the run's wall time (evaluation excluded) in which the driver was not
    waiting for gradients: the event loop, the coordinator core and (Ray) sending work and parameters."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    bench = workbench(scenario.model)
    t0 = time.perf_counter()
    gradient_backend = make_backend(backend, bench, workers=workers, address=address, chunk=chunk)
    t1 = time.perf_counter()
    try:
        workers_used = len(getattr(gradient_backend, "actors", [])) or 1
        sim = build(scenario, bench, gradient_backend)
        t2 = time.perf_counter()
        cpu0 = time.process_time()
        result = sim.run(max_gradients=scenario.gradients)
        cpu = time.process_time() - cpu0
        final = bench.evaluate(sim.core.run.served(), None)[0]
    finally:
        gradient_backend.close()  # counts the gradients computed for pushes that never came
    stats = gradient_backend.stats.as_dict()
    run_wall = result.seconds_total
    waiting = stats["seconds_wait"]  # blocked on results only: sending work is the driver's overhead
    staleness = np.array(result.staleness or [0])
    return {
        "scenario": asdict(scenario),
        "backend": backend,
        "workers": workers_used,
        "load_before": load_before,
        "gradients": result.gradients,
        "applied_updates": result.end_updates,
        "accuracy": round(float(final), 4),
        "accuracy_curve": [round(a, 4) for a in result.accuracy],
        "joined_by_churn": result.joined - scenario.devices,
        "rejections": result.rejections,
        "staleness_median": float(np.median(staleness)),
        "staleness_p90": float(np.percentile(staleness, 90)),
        "virtual_seconds": round(result.end_time, 1),
        "events": sim.queue.popped,
        "seconds_setup": round(t1 - t0, 2),
        "seconds_enroll": round(t2 - t1, 2),
        "seconds_run": round(run_wall, 2),
        "seconds_waiting": round(waiting, 2),
        "seconds_in_collect": round(result.seconds_gradient, 2),
        "seconds_compute": round(result.seconds_compute, 2),
        "driver_cpu_seconds": round(cpu, 2),
        "overhead": round(1.0 - waiting / run_wall, 3) if run_wall else math.nan,
        "gradients_per_second": round(result.gradients / run_wall, 1) if run_wall else math.nan,
        "wasted": stats["wasted"],
        "backend_stats": stats,
    }
