"""Issue 28's fifth probe: does a cap on the server's step, relative to the parameters, keep the default
stable at ×2-×4 of its rate without slowing it at ×1?

The fourth search's default (fedbuff-equal-ref10 at each model's own rate) ends the MLP at 0.20-0.67 at ×2
of its rate and at 0.09-0.32 at ×4. A trust-ratio cap (LARS, You, Gitman, Ginsburg 2017, applied to the
server's update rather than a layer's gradient): an update Δ with ‖Δ‖ > ρ‖θ‖ is shortened to ρ‖θ‖.
``record`` runs the default uncapped and reports the quartile means of ‖Δ‖/‖θ‖, the number a cap
would be chosen from; ``cap-R`` caps at ρ = R; ``guard+RULE`` wraps either in LossGuard (halve the rate
when the devices' loss climbs 1.5x above its low: server/strategies/guard.py). Runs only workloads an
earlier search has reported on (sim/workloads.py CHOICE and the third search's): a next search's held-back
half must be fresh. Not an experiment (no results file): one line per run, each time to the target against
the best tuned run of docs/results/default-search.json.
``python -m lab.probes.step_cap labels2-mlp adjacent-mlp --factors 1,2,4 --rules record,cap-0.01``.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from lab.probes.adaptive_step import searched_runs
from server.strategies.base import Strategy
from server.strategies.guard import LossGuard
from server.strategies.wrappers import StrategyWrapper

PLAIN: dict[str, Any] = {}  # the search's own ``build``, before this process first replaced it


class StepCap(StrategyWrapper):
    """The inner strategy's update, shortened to ``rho`` × ‖θ‖ when longer (None: never), its ratio kept."""

    def __init__(self, inner: Strategy, rho: float | None) -> None:
        super().__init__(inner)
        self.rho, self.ratios, self.capped = rho, [], 0

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        step = self.inner.aggregate(params) - params
        size, base = float(np.linalg.norm(step)), float(np.linalg.norm(params))
        ratio = size / base if base > 0 else 0.0
        self.ratios.append(ratio)
        if self.rho is not None and ratio > self.rho:
            self.capped += 1
            step = step * np.float32(self.rho / ratio)
        return params + step


def probe(job: tuple[str, float, str]) -> dict[str, Any]:
    import lab.experiments.default_search as search
    from server.strategies import default_strategy
    from sim.workloads import workload

    name, factor, rule = job
    arm = "fedbuff-equal-ref10"
    rate = default_strategy(workload(name).model)[1] * factor
    plain, built = PLAIN.setdefault("build", search.build), []  # the first job's: a worker runs several

    def build(arm_: str, lr: float) -> Strategy:
        cap = rule.removeprefix("guard+")
        built.append(StepCap(plain(arm_, lr), None if cap == "record" else float(cap.split("-")[1])))
        return LossGuard(built[-1]) if rule.startswith("guard+") else built[-1]

    search.build = build  # type: ignore[assignment]  # this worker process only
    output = search.simulate(search.Run(arm, rate, name))
    ratios = np.array(built[-1].ratios)
    quarter = max(1, len(ratios) // 4)
    output["ratio_quartiles"] = [
        float(f"{ratios[i * quarter : (i + 1) * quarter].mean():.3g}") for i in range(4)
    ]
    output["capped"] = built[-1].capped / max(1, len(ratios))
    return output


def main() -> None:
    from lab.experiments.default_search import judge, time_to
    from sim.workload_halves import SEEN

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--factors", default="1,2,4")
    parser.add_argument("--rules", default="record")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    seen = set(SEEN)
    if unknown := [w for w in args.workloads if w not in seen]:
        parser.error(f"not a workload a search has chosen on: {unknown}")
    jobs = [
        (w, float(f), r)
        for w in args.workloads
        for f in args.factors.split(",")
        for r in args.rules.split(",")
    ]
    runs = searched_runs()
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for (workload, factor, rule), output in zip(jobs, pool.map(probe, jobs), strict=True):
            # the last search's runs judge it, if it ran this workload (a probe may go where it did not)
            judged = judge(runs[workload]) if workload in runs else {"target": None, "best": None}
            hit = None if judged["best"] is None else time_to(output, judged["target"])
            print(json.dumps({
                "workload": workload, "factor": factor, "rule": rule, "final": output["final"],
                "target": judged["target"], "best": judged["best"],
                "ratio": None if hit is None else round(hit / judged["best"]["time"], 2),
                "ratio_quartiles": output["ratio_quartiles"], "capped": round(output["capped"], 3),
                "diverged": output.get("diverged"),
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
