"""Issue 28's first probe: does the default plateau on a workload, and on which digits?

Not an experiment (no plans, no results file): a quick look in the simulator (sim/fleet.py, virtual time,
real ONNX gradients) at the default against DynSGD and FedBuff on one suite workload, printing the final
and best accuracy, the virtual seconds to 80% and 90%, and the per-class recall at the end, one JSON line
per arm. ``python -m lab.probes.default_plateau adjacent-cnn [--gradients 3000]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

ARMS: dict[str, dict[str, Any]] = {
    "dynsgd-clip": {"strategy": "dynsgd-clip"},  # the default, at its own rate
    "dynsgd-0.2": {"strategy": "dynsgd", "learning_rate": 0.2},
    "fedbuff-0.4": {"strategy": "fedbuff", "learning_rate": 0.4},
}


def probe(name: str, gradients: int, arms: dict[str, dict[str, Any]] = ARMS) -> list[dict[str, Any]]:
    """One run per arm on workload ``name`` (sim/workloads.py), devices always online, seed 1."""
    from itertools import count

    from models.manifest import builtin
    from sim.controlled import Workbench
    from sim.fleet import FleetSimulator
    from sim.population import FleetTiming
    from sim.scripted import strategy_factory
    from sim.workloads import workload

    w = workload(name)
    train, test = w.data()
    bench = Workbench(builtin(w.model), train, test)
    shards = w.shards(train)
    timing = FleetTiming(mean_online=1e9, mean_offline=1.0, churn=0.0)
    speeds = [timing.flops_per_sample / (ms * 1e-3) / 1e9 for ms in w.speeds()]  # GFLOP/s
    rows = []
    for arm, fields in arms.items():
        joined = count()
        sim = FleetSimulator(
            bench, strategy_factory(**fields), devices=w.devices, seed=1, timing=timing,
            shard_for=lambda _rng, joined=joined: shards[next(joined) % len(shards)], batch=w.batch or 100,
            speeds=speeds,
            eval_every_gradients=max(1, gradients // 30),
        )  # fmt: skip
        started = time.perf_counter()
        result = sim.run(max_gradients=gradients)
        recall = bench.evaluator.per_class_recall(sim.core.run.params)
        reached = {t: result.first_time_at(t) for t in (0.8, 0.9)}
        rows.append({
            "workload": name, "speed_order": w.speed_order, "arm": arm, "final": result.accuracy[-1],
            "best": max(result.accuracy), "s_to_80": reached[0.8] and reached[0.8][0],
            "s_to_90": reached[0.9] and reached[0.9][0], "recall": [round(float(r), 2) for r in recall],
            "wall_s": round(time.perf_counter() - started, 1),
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--gradients", type=int, default=3000)
    args = parser.parse_args()
    for row in probe(args.workload, args.gradients):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
