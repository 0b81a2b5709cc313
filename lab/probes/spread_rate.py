"""Issue 28's twenty-first probe: the rate raised with the spread of the arrivals' staleness.

Read by kind, the held-back halves of the eleventh to the eighteenth searches put the MLP fleets with fixed
batches and a 30x speed spread apart: six of seven pass both checks at ×2 of the MLP's rate and none at ×1
(the seventh passes at none), while the 100- and 1,000-device MLP fleets with equal task times (even
speeds, or I-Prof) fall at ×2. What the server sees that differs is the staleness of the arrivals: with
equal task times every gradient is about τ̄ updates old, with a 30x spread most come from fast devices a
few updates old and a few from slow ones many updates old (the nineteenth probe: p10-p90 of 17-22 against
6-39 at 100 devices). The nineteenth read the concurrency scale from a lower quantile, which raised the
rate on every fleet with any spread and collapsed the 1,000-device ones. Rules, each the shipped default at
its model's rate, with D = (p90 − p10) / p50 of the last 200 arrivals' staleness (``staleness_spread``)
and s = min(``most``, max(1, D / ``d0``)) once 200 have arrived (1 before: the first arrivals' staleness
climbs from 0 and spreads whatever the fleet):

* ``off``: the concurrency scale as the seventeenth shipped it (τ̄ as it is);
* ``spread-D0-MOST``: that, and the rate (not the step cap) × s, on any fleet (its first run: it also
  slowed the 20-device fleets, where the concurrency scale is off, and it counted from the first arrival);
* ``relax-D0``: the concurrency scale reads τ̄ / s for the rate (not the step cap), ``most`` 2, so a fleet
  whose staleness spreads steps up to twice as far but never further than the rate itself: 20-device
  fleets (τ̄ under 5) are as ``off``. The default since the nineteenth search: ``ConcurrencyScale.spread``,
  which this rule sets (``relax-1`` is the default);

each run also reports its arrivals' staleness percentiles and D over the run's second half, and under
``spread`` the mean s.

Judged against the search that reported each workload. Not an experiment (no results file): one JSON line
per run. ``python -m lab.probes.spread_rate dirichlet0.5-mlp-100dev-30x --rules off,relax-1 --seeds 2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.probes.rule_jobs import report, rule_jobs, run_default
from lab.probes.staleness_quantile import concurrency_scale, record_staleness
from server.strategies.base import Strategy
from server.strategies.fairness import staleness_spread


def spread_factor(staleness: Any, d0: float, most: float, *, window: int = 200) -> float:
    """What a rule scales by: D / ``d0`` within [1, ``most``] once ``window`` arrivals are in (1 before)."""
    return 1.0 if len(staleness) < window else min(most, max(1.0, staleness_spread(staleness) / d0))


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    name, rule, seed = job
    kind, *values = rule.split("-")
    seen: list[int] = []
    factors: list[float] = []

    def adapt(strategy: Strategy) -> Strategy:
        layer = concurrency_scale(strategy)
        layer.spread = float(values[0]) if kind == "relax" else None
        if kind == "spread":
            d0, most = (float(v) for v in values)
            plain = layer.factor

            def factor() -> float:
                factors.append(spread_factor(layer.recent, d0, most, window=layer.window))
                return plain() * factors[-1]

            layer.factor = factor  # type: ignore[method-assign]
        record_staleness(layer, seen)
        return strategy

    output = run_default(name, seed, adapt)
    late = seen[len(seen) // 2 :]
    figures: dict[str, Any] = {
        "p10_50_90": np.percentile(late, [10, 50, 90]).round(1).tolist() if late else [],
        "dispersion": round(staleness_spread(late), 2) if late else None,
    }
    if factors:
        figures["mean_factor"] = round(float(np.mean(factors[len(factors) // 2 :])), 2)
    return output | {"staleness": figures}


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "off,relax-1")
    report(probe, jobs, args.workers, lambda output: {"staleness": output["staleness"]})


if __name__ == "__main__":
    main()
