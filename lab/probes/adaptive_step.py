"""Issue 28's fourth probe: can the server adapt the default's step, so that no rate needs tuning?

The third default search found the fastest tuned run was, on most held-back workloads, the default itself
at another rate (×2-×4 on logistic regression and the MLP), while ×2-×4 ended at chance on others (the CNN
with even speeds, batch 32, I-Prof batches). Three server-side rules, each wrapping the default
(fedbuff-equal, reference 10, γ 0.3) and multiplying its step:

* ``agree-B``: log m += B × cos(this update, the last) (hypergradient descent on log γ, Baydin et al. 2018);
* ``disagree-B-C``: log m −= B × (cos − C) (the sign reversed: asynchrony's implicit momentum, Mitliagkas
  et al. 2016, shows as agreement between successive updates);
* ``dog-S``: DoG (Ivgi, Hinder, Carmon 2023), γ_t = S × max‖x_i − x_0‖ / √Σ‖g_i‖², g the update over γ;

and ``cosines`` records the cosine between successive updates of the plain default (quartile means).
Each run's time to the third search's target is compared with that search's best tuned run
(docs/results/default-search.json). Not an experiment (no results file): one line per run.
``python -m lab.probes.adaptive_step adjacent-logreg labels4-batch32 --rules agree-0.05,dog-0.5``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from server.strategies.base import Strategy
from server.strategies.by_label import cosine
from server.strategies.wrappers import StrategyWrapper

DEFAULT = ("fedbuff-equal-ref10", 0.3)
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "default-search.json"
# the search's own ``build``, before this process first replaced it (until 2026-11-28 each later job in a
# worker wrapped the earlier job's rule too)
PLAIN: dict[str, Any] = {}


class AdaptiveStep(StrategyWrapper):
    """The inner strategy's update g·γ, applied as γ_t·g by ``rule``; ``cosines`` keeps the signal."""

    def __init__(self, inner: Strategy, rule: str) -> None:
        super().__init__(inner)
        kind, *values = rule.split("-")
        self.kind, self.values = kind, [float(v) for v in values]
        self.multiplier, self.previous = 1.0, None
        self.cosines: list[float] = []
        self.origin: np.ndarray | None = None
        self.radius = self.squares = 0.0

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        step = self.inner.aggregate(params) - params
        if self.kind == "dog":
            gradient = step / float(self.inner.learning_rate)
            return params + np.float32(self.dog(params, gradient)) * gradient
        previous, self.previous = self.previous, step
        if previous is not None and np.isfinite(step).all() and step.any() and previous.any():
            agreement = cosine(step, previous)
            self.cosines.append(agreement)
            if self.kind == "agree":
                self.multiplier *= math.exp(self.values[0] * agreement)
            elif self.kind == "disagree":
                self.multiplier *= math.exp(-self.values[0] * (agreement - self.values[1]))
            self.multiplier = min(4.0, max(0.25, self.multiplier))
        return params + np.float32(self.multiplier) * step

    def dog(self, params: np.ndarray, gradient: np.ndarray) -> float:
        if self.origin is None:
            self.origin, self.radius = params.copy(), 1e-4 * (1 + float(np.linalg.norm(params)))
        self.squares += float(gradient @ gradient)
        self.radius = max(self.radius, float(np.linalg.norm(params - self.origin)))
        return self.values[0] * self.radius / math.sqrt(self.squares) if self.squares > 0 else 0.0


def probe(job: tuple[str, str]) -> dict[str, Any]:
    import lab.experiments.default_search as search

    workload, rule = job
    built: list[AdaptiveStep] = []

    plain = PLAIN.setdefault("build", search.build)  # the first job's: a worker process runs several

    def build(arm: str, lr: float) -> Strategy:
        built.append(AdaptiveStep(plain(*DEFAULT), rule))
        return built[-1]

    search.build = build  # type: ignore[assignment]  # this worker process only
    output = search.simulate(search.Run(rule, DEFAULT[1], workload))
    cosines = np.array(built[-1].cosines)
    quarter = max(1, len(cosines) // 4)
    output["cosine_quartiles"] = [
        round(float(cosines[i * quarter : (i + 1) * quarter].mean()), 3) for i in range(4)
    ]
    return output


def grouped(results: dict[str, Any]) -> dict[str, dict[tuple[str, float], list[Any]]]:
    """A default search's runs by workload, then (arm, rate): one output per seed, which ``judge`` takes
    together as the search did. The runs on fresh seeds (the fifteenth search on) are left out: the search
    judged the held-back half on its own seeds and ran only the default and the tuned runs again."""
    fresh = set(results["summary"].get("seeds", {}).get("fresh", []))
    runs: dict[str, dict[tuple[str, float], list[Any]]] = {}
    for o in results["runs"]:
        if o["run"]["seed"] in fresh:
            continue
        runs.setdefault(o["run"]["workload"], {}).setdefault((o["run"]["arm"], o["run"]["lr"]), []).append(o)
    return runs


def results_at(commit: str) -> dict[str, Any]:
    """The default search's results file (docs/results/default-search.json) as ``commit`` holds it."""
    show = ["git", "show", f"{commit}:docs/results/default-search.json"]
    return json.loads(subprocess.check_output(show, cwd=RESULTS.parents[2]))


def searched_default(summary: dict[str, Any]) -> tuple[str, Any]:
    """The default a search reported, as (arm, rates) for default_search's ``arm_for`` and ``rate_for``."""
    rates, caps = summary["default_rate"], summary.get("default_max_step", {})
    if isinstance(rates, dict):
        rates = tuple((m, r, caps[m]) if m in caps else (m, r) for m, r in rates.items())
    return summary["default"], rates


def searched_runs() -> dict[str, dict[tuple[str, float], list[Any]]]:
    """The last default search's runs (docs/results/default-search.json), ``grouped``."""
    return grouped(json.loads(RESULTS.read_text()))


def against_search(
    runs: dict[str, dict[tuple[str, float], list[Any]]], name: str, output: Any
) -> dict[str, Any]:
    """A probe's run of workload ``name`` judged as the search that ran it judged its own: that search's
    target, best final and best run, and the run's time to the target over the best run's (None: missed, or
    no search in ``runs`` ran the workload)."""
    from lab.experiments.default_search import judge, time_to

    if name not in runs:
        return {"target": None, "best_final": None, "best": None, "ratio": None}
    judged = judge(runs[name])
    hit = time_to(output, judged["target"])
    ratio = None if hit is None else round(hit / judged["best"]["time"], 2)
    return {
        "target": judged["target"],
        "best_final": judged["best_final"],
        "best": judged["best"],
        "ratio": ratio,
    }


def main() -> None:
    from lab.experiments.default_search import judge

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--rules", default="agree-0.02,agree-0.05,disagree-0.05-0.2,dog-1.0,dog-0.5,cosines")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs = searched_runs()
    jobs = [(w, rule) for w in args.workloads for rule in args.rules.split(",")]
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for (workload, rule), output in zip(jobs, pool.map(probe, jobs), strict=True):
            default = judge(runs[workload])["runs"][f"{DEFAULT[0]}@{DEFAULT[1]}"]["ratio"]
            print(json.dumps({
                "workload": workload, "rule": rule, "final": output["final"],
                **against_search(runs, workload, output), "default": default,
                "cosine_quartiles": output["cosine_quartiles"],
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
