"""Issue 28's twelfth probe: can the devices' pushed losses set the default's rate, so that a workload that
wants twice (or half) its model's rate gets it?

The eleventh search's misses each wanted another multiple of the model's rate: labels2-cnn-iprof-even was
fastest at ×2 (1.11× at ×1), dirichlet0.1-mlp-100dev-batch32-30x ended highest at ×4 (0.945 against 0.939),
while dirichlet10-mlp-100dev-batch32-even fell to 0.70 at ×2. Two rules on the devices' loss, each wrapping
the shipped default at its own rate and multiplying its step by m ∈ [0.25, 4]:

* ``bold-U-D-W`` (the "bold driver", Battiti 1989): every W pushes, m ×= U if the loss average fell over
  them, else m ×= D;
* ``plateau-W-T``: start at m = 2; every W pushes, halve m (to ≥ 0.5) when the loss average fell by less
  than T (a fraction) over them (ReduceLROnPlateau, on the server).

``constant`` is the default itself, for the same seed. The loss average is an exponential one over W
pushes. Judged against the eleventh search's runs of the same workload (docs/results/default-search.json):
its target and best tuned time. Not an experiment (no results file): one JSON line per run.
``python -m lab.probes.loss_rate labels2-cnn-iprof-even --rules constant,bold-1.1-0.5-50 --seeds 2``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lab.probes.rule_jobs import report, rule_jobs, run_default
from server.strategies.base import Arrival, Strategy
from server.strategies.wrappers import StrategyWrapper

BOUNDS = (0.25, 4.0)


class LossRate(StrategyWrapper):
    """The inner strategy with its rate multiplied by ``multiplier``, which ``rule`` moves on the pushed
    losses; ``trace`` keeps (pushes seen, multiplier) at each move."""

    def __init__(self, inner: Strategy, rule: str) -> None:
        super().__init__(inner)
        kind, *values = rule.split("-")
        self.kind, self.values = kind, [float(v) for v in values]
        self.multiplier = 2.0 if kind == "plateau" else 1.0
        # the pushes between moves: bold-U-D-W's last value, plateau-W-T's first (constant never moves)
        self.window = int({"bold": self.values[-1], "plateau": self.values[0]}.get(kind, 1))
        self.loss_average: float | None = None
        self.last: float | None = None
        self.seen = 0
        self.trace: list[tuple[int, float]] = []

    def receive(self, arrival: Arrival) -> float:
        loss = math.nan if arrival.loss is None else float(arrival.loss)
        if self.kind != "constant" and math.isfinite(loss):
            self.seen += 1
            alpha = 2.0 / (self.window + 1)
            self.loss_average = (
                loss if self.loss_average is None else (1 - alpha) * self.loss_average + alpha * loss
            )
            if self.seen % self.window == 0:
                self._move(self.loss_average)
        return self.inner.receive(arrival)

    def _move(self, average: float) -> None:
        last, self.last = self.last, average
        if last is None:
            return
        if self.kind == "bold":
            up, down = self.values[0], self.values[1]
            self.multiplier *= up if average < last else down
        elif self.kind == "plateau" and average > (1 - self.values[1]) * last:
            self.multiplier = max(0.5, self.multiplier / 2)
        self.multiplier = min(BOUNDS[1], max(BOUNDS[0], self.multiplier))
        self.trace.append((self.seen, round(self.multiplier, 3)))

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        return self.aggregate_at(params, self.multiplier)


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    name, rule, seed = job
    built: list[LossRate] = []

    def adapt(strategy: Strategy) -> Strategy:
        built.append(LossRate(strategy, rule))
        return built[-1]

    output = run_default(name, seed, adapt)
    output["trace"] = built[-1].trace
    return output


def multipliers(output: dict[str, Any]) -> dict[str, Any]:
    trace = output["trace"]
    return {"multiplier": [m for _, m in trace[:: max(1, len(trace) // 8)]]}


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "constant,bold-1.1-0.5-50,plateau-100-0.02")
    report(probe, jobs, args.workers, multipliers)


if __name__ == "__main__":
    main()
