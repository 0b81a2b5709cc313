"""Issue 28's twenty-third probe: the spread rule on fleets of its kind that no half has held.

The rule (``ConcurrencyScale.spread``, shipped since the nineteenth search) lets the rate read τ̄ over the
spread of the arrivals' staleness, at most twice as far, on fleets whose staleness spreads: 100- and
1,000-device fleets with fixed batches and a 30x speed spread. The twenty-first probe chose it on 15 seen
fleets; the held-back halves since have held one fleet it acts on. This runs the eight fleets of that kind
in ``sim.workloads.FRESH_FLEETS`` (``python -m sim.workload_draw 23 5000 spread``: none a workload of any
half, data never seen by a choice) three ways on the same seeds (``RULES``): the default as shipped, the
default with the rule off, and the rule off at twice the model's rate (what six of seven such fleets seen
wanted). No search tuned these fleets, so each is judged as the search judges (``judge``) among the three
alone: the target is the best of their finals less 1 point, a way passes when it reaches the target within
1.1x of the fastest and ends within 0.5 points of the best final.

``python -m lab.probes.spread_fresh`` (72 runs): one JSON line a run, one a fleet judged, then the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from typing import Any

from lab.probes.rate_oracle import passes
from lab.probes.rule_jobs import each_run, run_default
from lab.probes.staleness_quantile import concurrency_scale, record_staleness
from server.strategies.base import Strategy
from server.strategies.fairness import staleness_spread

RULES = {"shipped": (True, 1.0), "off": (False, 1.0), "off-x2": (False, 2.0)}  # (rule on, × the rate)


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    """One run of the default on fleet ``name`` the ``rule`` way: the output, and its staleness's spread."""
    name, rule, seed = job
    on, scale = RULES[rule]
    seen: list[int] = []

    def adapt(strategy: Strategy) -> Strategy:
        layer = concurrency_scale(strategy)
        if not on:
            layer.spread = None
        record_staleness(layer, seen)
        return strategy

    output = run_default(name, seed, adapt, scale=scale)
    late = seen[len(seen) // 2 :]
    return output | {"dispersion": round(staleness_spread(late), 2) if late else None}


def way(verdict: dict[str, Any], rule: str) -> dict[str, Any]:
    """The judged runs of one way (``judge`` keys them as arm@rate; here the arm is the rule)."""
    return verdict["runs"][f"{rule}@{RULES[rule][1]}"]


def judged(outputs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One fleet's ways judged among themselves: the search's ``judge``, each way's checks added."""
    from lab.experiments.default_search_judge import judge

    verdict = judge({(rule, RULES[rule][1]): runs for rule, runs in outputs.items()})
    for rule in outputs:
        way(verdict, rule)["passes"] = all(passes(way(verdict, rule), verdict["best_final"]))
    return verdict


def cell(point: dict[str, Any]) -> str:
    """A way's time to the target and final, as the table prints it."""
    time = "miss" if point["time"] is None else f"{point['time']:.1f} s ({point['ratio']:.2f}x)"
    return f"{'**' if point['passes'] else ''}{time}, {point['final']:.3f}{'**' if point['passes'] else ''}"


def main() -> None:
    from sim.workloads import FRESH_FLEETS

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=[w.name for w in FRESH_FLEETS])
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--seeds", default="2,3,4")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rules = args.rules.split(",")
    if unknown := set(rules) - set(RULES):
        parser.error(f"unknown rules {sorted(unknown)}; known: {', '.join(RULES)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [(w, r, s) for w in args.workloads for s in seeds for r in rules]
    outputs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (name, rule, seed), output in each_run(probe, jobs, args.workers):
        outputs.setdefault(name, {}).setdefault(rule, []).append(output)
        print(json.dumps({"workload": name, "rule": rule, "seed": seed, "final": output["final"],
                          "end_time": output["end_time"], "diverged": output["diverged"],
                          "dispersion": output["dispersion"]}), flush=True)  # fmt: skip
    counts: Counter[str] = Counter()
    rows = [f"| fleet | spread D | target | {' | '.join(rules)} |", "|---|---|---|" + "---|" * len(rules)]
    for name, ways in outputs.items():
        verdict = judged(ways)
        print(json.dumps({"workload": name, **verdict}), flush=True)
        points = [way(verdict, r) for r in rules]
        counts.update(r for r, p in zip(rules, points, strict=True) if p["passes"])
        spread = statistics.median(o["dispersion"] or 0 for o in ways[rules[0]])
        rows.append(f"| {name} | {spread:.1f} | {verdict['target']:.3f} | {' | '.join(map(cell, points))} |")
    print("\n".join(rows))
    tally = ", ".join(f"{r} {counts[r]} of {len(outputs)}" for r in rules)
    print(f"passing both checks among these ways: {tally}")


if __name__ == "__main__":
    main()
