"""Issue 28's thirteenth probe: can the agreement of a buffer's gradients set the default's rate?

At the shipped rate (1.2 for every model) the searches' held-back halves split the MLP workloads in two
(docs/default-history.md, the thirteenth probe): those on skewed splits (one or two labels a device,
adjacent shards, Dirichlet 0.1) were fastest or ended highest at 2-4x, those on milder ones (Dirichlet 10 and
0.5, four labels) at 0.5-1x, and fell short at 2x. The signal share of a buffer, ρ = |G|²/(|G|² + tr Σ/K)
(lab/probes/noise_scale.py: how much its K gradients agree), over the first half of a run at 1x sorted them
the same way: 0.02-0.30 on the first, 0.35-0.83 on the second. Late in a run ρ falls everywhere (the
gradients are mostly noise by then), so the rule reads it once, early, and keeps what it set:

* ``agree-R-W-LO-HI``: the default at its rate for the first W updates, then its step × clip(R/ρ̂, LO, HI)
  for the rest of the run, ρ̂ the ratio of the two moving averages (β 0.9) at update W;
* ``constant``: the default itself, for the same seed.

It reads only the buffer (no loss, no labels). Judged against the search that reported each workload (its
results file at that commit): that search's target and best tuned time. Not an experiment (no results
file): one JSON line per run. ``python -m lab.probes.agreement_rate labels1-mlp-30x --rules
constant,agree-0.45-100-0.5-2 --seeds 2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.probes.adaptive_step import grouped, results_at
from lab.probes.noise_scale import NoiseScale
from lab.probes.rate_oracle import HALVES
from lab.probes.rule_jobs import report, rule_jobs, run_default
from server.strategies.base import Strategy

# the searches whose results file holds a held-back half reported at the shipped rates' family, oldest first:
# the eighth to the tenth, then the halves the rate oracle reads (one list to extend after each search); a
# workload is judged by the last of them that ran it
SEARCHES = ("b8049ec", "bdba53a", "9bf8594", *HALVES.values())


class AgreementRate(NoiseScale):
    """The inner strategy at its rate for ``window`` updates, then × clip(``reference``/ρ̂, ``low``,
    ``high``) from ρ̂ at that update on."""

    def __init__(self, inner: Strategy, *, reference: float, window: int, low: float, high: float) -> None:
        super().__init__(inner)
        self.reference, self.window, self.low, self.high = reference, window, low, high
        self.multiplier = 1.0
        self.set_at: tuple[float, float] | None = None  # (ρ̂, multiplier) once set

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        self.observe()
        if self.set_at is None and len(self.ratios) >= self.window:
            rho = self.ratio()
            self.multiplier = min(self.high, max(self.low, self.reference / max(rho, 1e-9)))
            self.set_at = (round(rho, 3), round(self.multiplier, 3))
        return self.aggregate_at(params, self.multiplier)


def searched_runs() -> dict[str, dict[tuple[str, float], list[Any]]]:
    """Each workload's runs in the last of ``SEARCHES`` that ran it, by (arm, rate): one output per seed."""
    runs: dict[str, dict[tuple[str, float], list[Any]]] = {}
    for commit in SEARCHES:
        runs.update(grouped(results_at(commit)))
    return runs


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    name, rule, seed = job
    built: list[NoiseScale] = []
    kind, *values = rule.split("-")

    def adapt(strategy: Strategy) -> Strategy:
        if kind == "agree":
            r, w, lo, hi = (float(v) for v in values)
            built.append(AgreementRate(strategy, reference=r, window=int(w), low=lo, high=hi))
        else:
            built.append(NoiseScale(strategy))  # the default, its ρ recorded
        return built[-1]

    output = run_default(name, seed, adapt)
    output["set_at"] = getattr(built[-1], "set_at", None)
    ratios = built[-1].ratios
    output["rho_at"] = {n: round(ratios[n - 1], 3) for n in (25, 50, 100, 200, 400) if n <= len(ratios)}
    return output


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "constant,agree-0.45-100-0.5-2")
    report(probe, jobs, args.workers, lambda output: {"set_at": output["set_at"], "rho_at": output["rho_at"]})


if __name__ == "__main__":
    main()
