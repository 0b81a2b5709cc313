"""Issue 28's nineteenth probe: the concurrency scale read from a lower quantile of the staleness.

Across the eleventh to the fifteenth held-back halves (lab/probes/rate_oracle.py) the default's rate is
the best constant one (both checks on 23 of 40 workloads; ×2 14, ×0.5 11), but the best multiplier per
workload would pass 35: a rate per workload is what is missing. Among the 100-device MLP fleets the ones
that want ×2 mostly have unequal speeds (a 30x spread), and the ones that collapse at ×2 mostly have
equal task times (even speeds, or I-Prof sizing each batch to the same time). ``ConcurrencyScale`` scales
the rate (and the MLP's step cap) by 5/τ̄ past a median staleness τ̄ of 5 (6 for the cap). With equal task
times every gradient is about τ̄ updates old; with a 30x spread most arrive from fast devices a few
updates old and a few from slow ones many updates old, and the median may overstate the delay that
governs stability. A lower quantile tells the two apart. Rules, each the shipped default at the model's
rate:

* ``q-P``: τ̄ is the P-quantile of the last 200 arrivals' staleness instead of the median (``q-0.5``: the
  default as it was, before the nineteenth search read the staleness's spread), for the rate and the step
  cap alike;

each run also reports the staleness of its arrivals (the 10th, 25th, 50th and 90th percentiles, the mean).

Judged against the search that reported each workload. Not an experiment (no results file): one JSON
line per run. ``python -m lab.probes.staleness_quantile dirichlet0.1-mlp-100dev-batch32-30x --rules
q-0.5,q-0.25 --seeds 2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.probes.rule_jobs import report, rule_jobs, run_default
from server.strategies.base import Arrival, Strategy
from server.strategies.fairness import ConcurrencyScale


def concurrency_scale(strategy: Strategy) -> ConcurrencyScale:
    """The ``ConcurrencyScale`` layer inside the default's wrappers."""
    layer: Any = strategy
    while not isinstance(layer, ConcurrencyScale):
        layer = layer.inner
    return layer


def record_staleness(layer: ConcurrencyScale, seen: list[int]) -> None:
    """Note each arrival's staleness in ``seen`` as ``layer`` receives it."""
    receive = layer.receive

    def counted(arrival: Arrival) -> float:
        seen.append(arrival.staleness)
        return receive(arrival)

    layer.receive = counted  # type: ignore[method-assign]


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    name, rule, seed = job
    quantile = float(rule.split("-")[1])
    seen: list[int] = []  # this run's arrivals' staleness

    def adapt(strategy: Strategy) -> Strategy:
        layer = concurrency_scale(strategy)
        layer.spread = None  # the rule reads τ̄ from its quantile alone, as the default did then

        def typical() -> float:
            return max(float(np.quantile(layer.recent, quantile)) if layer.recent else 0.0, 1e-9)

        layer.typical = typical  # type: ignore[method-assign]
        record_staleness(layer, seen)
        return strategy

    output = run_default(name, seed, adapt)
    percentiles = np.percentile(seen, [10, 25, 50, 90]).round(1).tolist() if seen else []
    return output | {"staleness": {"p10_25_50_90": percentiles, "mean": round(float(np.mean(seen)), 1)}}


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "q-0.5,q-0.25")
    report(probe, jobs, args.workers, lambda output: {"staleness": output["staleness"]})


if __name__ == "__main__":
    main()
