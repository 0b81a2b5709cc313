"""Issue 28's sixth probe: does a step cap that shrinks with concurrency hold 100 devices at 2-4x the rate?

The fifth search's default (fedbuff-equal-ref10, the MLP's step capped at 0.03 of ‖θ‖) ended
dirichlet0.1-mlp-100dev at 0.38 at 2x its rate. A gradient τ̄ updates old has seen the model move up to τ̄
capped steps, so the cap is shrunk as τ̄ grows. Variants, each the default strategy (FedBuffEqual) with
the MLP's cap: ``fixed`` (the fifth's), ``power-P`` (the cap × the rate's concurrency factor to the P:
(10/τ̄)^P), ``ref-R`` (the cap × R/τ̄ past a median staleness R: ``cap_reference``, bounding the drift),
``rate-C`` (the shipped default, cap_reference 6, with the rate's own reference C instead of 10: a
higher rate on 20 devices with the same on 100 and 1,000 needs a steeper shrink), and on power-1:
``window-W`` (equal shares over W arrivals), ``no-share`` (equal shares off) and ``guard`` (inside
LossGuard). Runs only workloads an earlier search has reported on (sim/workloads.py
SEEN). Not an experiment (no results file): one line per run, its final accuracy and its time to the
target over the best tuned run of docs/results/default-search.json when that search ran the workload.
``python -m lab.probes.concurrency_cap labels2-100dev adjacent-mlp-100dev --variants fixed,ref-4,ref-6``.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any

CAP, RATE = 0.03, 0.6  # the MLP's cap and rate in the fifth search's default


def strategy(variant: str, rate: float) -> Any:
    """The default strategy at ``rate`` with the MLP's cap, changed as ``variant`` says."""
    from server.strategies.fairness import ConcurrencyScale
    from server.strategies.fedbuff_equal import FedBuffEqual
    from server.strategies.guard import LossGuard

    kind, _, value = variant.partition("-")
    settings: dict[str, Any] = {"learning_rate": rate, "concurrency_reference": 10.0, "cap_reference": None}
    if kind == "ref":
        settings["cap_reference"] = float(value)
    if kind == "rate":
        settings |= {"concurrency_reference": float(value), "cap_reference": 6.0}
    if kind == "window":
        settings["share_window"] = int(value)
    built = FedBuffEqual(**settings)
    if kind == "no":  # no-share: every weight 1
        built.cap = 1.0
    built.max_step = CAP
    if kind not in ("fixed", "ref", "rate"):  # the cap scaled like the rate, to a power
        power = float(value) if kind == "power" else 1.0
        crowd = built.inner
        assert isinstance(crowd, ConcurrencyScale)
        crowd.cap_factor = lambda: crowd.factor() ** (power / crowd.power)  # type: ignore[method-assign]
        crowd.cap_reference = crowd.reference  # set, so aggregate() applies the factor above
    return LossGuard(built) if kind == "guard" else built


def probe(job: tuple[str, float, str]) -> dict[str, Any]:
    import lab.experiments.default_search as search

    variant, factor, name = job
    search.build = lambda _arm, lr: strategy(variant, lr)  # type: ignore[assignment]  # this worker only
    return search.simulate(search.Run(variant, RATE * factor, name))


def main() -> None:
    from lab.experiments.default_search import judge, time_to
    from lab.probes.adaptive_step import searched_runs
    from sim.workload_halves import SEEN

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--factors", default="1,2,4")
    parser.add_argument("--variants", default="fixed,ref-4,ref-6")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if unknown := [w for w in args.workloads if w not in set(SEEN)]:
        parser.error(f"not a workload a search has reported on: {unknown}")
    jobs = [
        (v, float(f), w)
        for w in args.workloads
        for f in args.factors.split(",")
        for v in args.variants.split(",")
    ]
    runs = searched_runs()
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for (variant, factor, name), output in zip(jobs, pool.map(probe, jobs), strict=True):
            judged = judge(runs[name]) if name in runs else None
            hit = None if judged is None else time_to(output, judged["target"])
            print(json.dumps({
                "workload": name, "factor": factor, "variant": variant, "final": output["final"],
                "ratio": None if hit is None or judged is None else round(hit / judged["best"]["time"], 2),
                "diverged": output["diverged"],
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
