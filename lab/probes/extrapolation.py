"""Issue 28's sixteenth probe: does FedExP's server step, which lengthens the step as a buffer's gradients
disagree, carry the skewed fleets that want 2-4x the rate without breaking the mild ones?

Across the eighth to the fourteenth held-back halves the MLP fleets on skewed splits ended highest at 2-4x
the shipped rate and those on mild splits fell at 2x (docs/default-history.md). The thirteenth probe read
the buffers' agreement once, early, and kept the multiplier it set; its reading swung with the window.
FedExP (Jhunjhunwala, Wang and Joshi, ICLR 2023) sets the server step at every aggregation instead:
η = max(1, Σ‖g_i‖² / (2K‖ḡ‖²)) over the buffer's K weighted gradients. It is 1 where they agree and at
most K/2 (2.5 at the default's K = 5) where they are pure scatter, so it never shortens the default's step,
and it runs under the default's step cap and served average (FedExP's authors also average the last
iterates against its oscillation). Rules, each wrapping the shipped default at the model's rate:

* ``constant``: the default itself;
* ``fedexp``: FedExP's η for each buffer;
* ``fedexp-B``: η from moving averages (β = B) of the two sums, a steadier reading.

Judged against the search that reported each workload (its target and best tuned time). Not an experiment
(no results file): one JSON line per run. ``python -m lab.probes.extrapolation labels1-mlp-30x --rules
constant,fedexp,fedexp-0.9 --seeds 2``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from lab.probes.adaptive_step import against_search
from lab.probes.agreement_rate import searched_runs
from lab.probes.rule_jobs import each_run, run_default
from server.strategies.base import Strategy
from server.strategies.wrappers import StrategyWrapper


class Extrapolation(StrategyWrapper):
    """The inner strategy's step × max(1, Σ‖g_i‖² / (2K‖ḡ‖²)) (FedExP), read per buffer or, with ``beta``,
    from moving averages of the two sums."""

    def __init__(self, inner: Strategy, *, beta: float | None = None) -> None:
        super().__init__(inner)
        self.beta = beta
        self.spread = self.square = 0.0
        self.factors: list[float] = []

    def factor(self) -> float:
        terms = np.stack([np.float32(b.weight) * b.gradient for b in self.buffer]).astype(np.float64)
        if len(terms) < 2 or not np.isfinite(terms).all():
            return 1.0
        mean = terms.mean(axis=0)
        spread, square = float((terms**2).sum(axis=1).mean()), float(mean @ mean)
        if self.beta is not None:
            self.spread = self.beta * self.spread + (1 - self.beta) * spread
            self.square = self.beta * self.square + (1 - self.beta) * square
            spread, square = self.spread, self.square
        return max(1.0, spread / (2 * square)) if square > 0 else 1.0

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        self.factors.append(self.factor())
        return self.aggregate_at(params, self.factors[-1])


def probe(job: tuple[str, str, float, int]) -> dict[str, Any]:
    name, rule, scale, seed = job
    built: list[Extrapolation] = []
    kind, *values = rule.split("-")

    def adapt(strategy: Strategy) -> Strategy:
        if kind != "fedexp":
            return strategy
        built.append(Extrapolation(strategy, beta=float(values[0]) if values else None))
        return built[-1]

    output = run_default(name, seed, adapt, scale=scale)
    factors = np.array_split(np.array(built[-1].factors if built else [1.0] * 4), 4)
    output["factor_quartiles"] = [round(float(f.mean()), 2) if len(f) else 1.0 for f in factors]
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--rules", default="constant,fedexp,fedexp-0.9")
    parser.add_argument("--scales", default="1", help="the model's rate times each of these")
    parser.add_argument("--seeds", default="2")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs = searched_runs()
    jobs = [
        (w, r, float(x), int(s))
        for w in args.workloads
        for s in args.seeds.split(",")
        for x in args.scales.split(",")
        for r in args.rules.split(",")
    ]
    for (name, rule, scale, seed), output in each_run(probe, jobs, args.workers):
        print(json.dumps({
            "workload": name, "rule": rule, "scale": scale, "seed": seed, "final": output["final"],
            **against_search(runs, name, output),
            "factor": output["factor_quartiles"], "diverged": output["diverged"],
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
