"""Issue 28: each model's rate chosen again on the held-back halves that are seen now.

The rate oracle (rate_oracle.py) reads the shipped default at ×0.25 to ×4 of its rate on the held-back halves
of the eleventh to the sixteenth searches, which have since all joined the seen. This runs the default at
multipliers between those (``--multipliers``) on the same workloads and seeds, adds each to the workload's
runs as its search stored them, judges them all together as the search judges (``judge``: the added rates
are tuned configurations too, so they may set the best time or final), and counts, for each model and
multiplier, the workloads where it reaches the target within 1.1x of the best time and ends within 0.5
points of the best final. The multiplier passing most, for each model, is a candidate rate for the next
search, which reports it on a half none of this saw.

``python -m lab.probes.model_rate --multipliers 0.7,1.4``: one JSON line a workload, then the counts. Each
search's workloads are run with the default it reported (its results file's), so ``--searches 60fd943
--multipliers 1.4285714 --models mnist_cnn`` runs the seventeenth's CNN workloads at the eleventh's rate.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from lab.probes.adaptive_step import grouped, results_at, searched_default
from lab.probes.rate_oracle import ELEVENTHS, MULTIPLIERS, passes

Cell = tuple[float | None, float, bool] | None  # (ratio to the best time, final, passing both checks)


def standing(
    runs: dict[tuple[str, float], list[Any]], rates: dict[float, tuple[str, float]]
) -> tuple[float, dict[str, Any], dict[float, Cell]]:
    """A workload's runs judged together (the search's ``judge``): its best final and best run, and for each
    multiplier's configuration in ``rates`` its ratio, final and whether it passes both checks (None: not
    run)."""
    from lab.experiments.default_search_judge import judge

    judged = judge(runs)
    cells: dict[float, Cell] = {}
    for m, (arm, lr) in rates.items():
        point = judged["runs"].get(f"{arm}@{lr}")
        fast, high = passes(point, judged["best_final"])
        ratio = None if point is None or point["ratio"] is None else round(point["ratio"], 3)
        cells[m] = None if point is None else (ratio, point["final"], fast and high)
    return judged["best_final"], judged["best"], cells


def main() -> None:
    import lab.experiments.default_search as search
    from lab.probes.rule_jobs import each_run
    from sim.workloads import workload

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--multipliers", default="0.7,1.4", help="the rates to add, as × the reported one")
    parser.add_argument("--models", default="mnist_cnn,mlp,logreg")
    parser.add_argument("--searches", default=",".join(ELEVENTHS), help="the searches' commits")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    added = [float(m) for m in args.multipliers.split(",")]
    models = args.models.split(",")

    def config(default: tuple[str, Any], name: str, factor: float) -> tuple[str, float]:
        model = workload(name).model
        return search.arm_for(*default, model), round(search.rate_for(default[1], model) * factor, 6)

    held: list[tuple[str, str, tuple[str, Any], dict[tuple[str, float], list[Any]]]] = []
    jobs: list[search.Run] = []
    for commit in args.searches.split(","):
        results = results_at(commit)
        runs, default = grouped(results), searched_default(results["summary"])
        for name in results["summary"]["held_back"]:
            if workload(name).model not in models:
                continue
            seeds = [o["run"]["seed"] for o in runs[name][config(default, name, 1.0)]]
            held.append((commit, name, default, runs[name]))
            jobs += [search.Run(*config(default, name, m), name, seed) for m in added for seed in seeds]
    outputs: dict[tuple[str, str, float], list[Any]] = {}
    for run, output in each_run(search.simulate, jobs, args.workers):
        outputs.setdefault((run.workload, run.arm, run.lr), []).append(output)
    factors = sorted({*(float(m) for m in MULTIPLIERS), *added})
    counts: Counter[tuple[str, float]] = Counter()
    for commit, name, default, runs in held:
        extra = {config(default, name, m): outputs[(name, *config(default, name, m))] for m in added}
        rates = {m: config(default, name, m) for m in factors}
        best_final, best, cells = standing({**runs, **extra}, rates)
        for m, cell in cells.items():
            counts[workload(name).model, m] += bool(cell and cell[2])
        print(json.dumps({"search": commit, "workload": name, "best_final": best_final, "best": best,
                          "cells": {str(m): cell for m, cell in cells.items()}}), flush=True)  # fmt: skip
    for model in models:
        total = sum(workload(name).model == model for _, name, _, _ in held)
        row = ", ".join(f"×{m} {counts[model, m]}" for m in factors)
        print(f"{model} ({total} workloads), passing both checks: {row}")


if __name__ == "__main__":
    main()
