"""Issue 28: the earlier held-back halves judged as the default search judges from the fifteenth on.

Each search judged the default on a held-back half against the best of ten configurations on the very
seeds reported (2-4), and against one tuned on two of them and timed on the third. From the fifteenth on it
also runs the configurations tuned on seeds 2-4 (the fastest, the highest-ending) and the default again on
fresh seeds (``FRESH_SEEDS``) and judges them by the reported target (``fresh_seeds`` in
default_search_judge.py). This applies that to the halves the current default was reported on (the
eleventh to the fourteenth), from their results files in the history. Not an experiment (no results
file): one JSON line per workload. ``python -m lab.probes.fresh_seeds 8b230ac b7b881f``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lab.probes.adaptive_step import results_at, searched_default

# the searches that reported the current default (the eleventh's) on a held-back half
SEARCHES = ("8b230ac", "b7b881f", "bec1c0c", "73bcf41")


def main() -> None:
    from lab.experiments.default_search import FRESH_SEEDS, Run, arm_for, rate_for, simulate
    from lab.experiments.default_search_judge import MAX_GAP, MAX_RATIO, fresh_seeds, tuned
    from lab.probes.rule_jobs import each_run
    from sim.workloads import workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("searches", nargs="*", default=SEARCHES)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    held: list[tuple[str, str, dict[str, Any], dict[str, Any], tuple[str, float]]] = []
    runs: list[Run] = []  # every workload's, on one pool
    for commit in args.searches:
        summary = results_at(commit)["summary"]
        arm, rates = searched_default(summary)  # the eleventh's choice, for the searches above
        for name, reported in summary["held_back"].items():
            judged = summary["judged"][name]
            model = workload(name).model
            default = (arm_for(arm, rates, model), round(rate_for(rates, model), 6))
            if judged["runs"].get("{}@{}".format(*default)) != reported["default"]:
                raise SystemExit(f"{commit} did not report its default on {name}")
            held.append((commit, name, judged, reported, default))
            configs = dict.fromkeys([default, *tuned(judged)])
            runs += [Run(a, lr, name, seed) for a, lr in configs for seed in FRESH_SEEDS]
    outputs: dict[str, dict[tuple[str, float], list[Any]]] = {}
    for run, output in each_run(simulate, runs, args.workers):
        outputs.setdefault(run.workload, {}).setdefault((run.arm, run.lr), []).append(output)
    for commit, name, judged, reported, default in held:
        again = fresh_seeds(judged, outputs[name], default)
        print(json.dumps({
            "search": commit, "workload": name, "default": f"{default[0]}@{default[1]}",
            "tuned": again["tuned"], "highest": again["highest"], "ratio": again["ratio"],
            "final_gap": round(again["final_gap"], 4), "default_fresh": again["default"],
            "fastest_fresh": again["fastest"],
            "within_1.1x": again["ratio"] is not None and again["ratio"] <= MAX_RATIO,
            "final_within_0.5": again["final_gap"] <= MAX_GAP,
            "reported_ratio": reported["default"]["ratio"],
            "reported_gap": round(reported["best_final"] - reported["default"]["final"], 4),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
