"""What a strategy does to each device's gradients, for issue 28's cause figures.

``Recorder.wrap`` puts an outermost wrapper around a strategy that notes, for each arrival, the
device, its raw gradient norm, the norm of what was buffered (so the clip ratio) and the step it adds
to the model (weight × rate × buffered norm, over K for an averaging strategy); ``recording_fleet``
also evaluates the per-class recall at each evaluation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from server.strategies import Strategy, StrategyWrapper
from server.strategies.base import Arrival
from sim.workloads import Workload


class Recorder:
    def __init__(self) -> None:
        self.arrivals: dict[str, list[tuple[float, float, float]]] = defaultdict(list)  # raw, clip, step
        self.recall: list[list[float]] = []

    def wrap(self, strategy: Strategy) -> Strategy:
        recorder = self

        class Recording(StrategyWrapper):
            name = strategy.name  # type: ignore[assignment]

            def receive(self, arrival: Arrival) -> float:
                before = len(self.inner.buffer)
                weight = self.inner.receive(arrival)
                raw = float(np.linalg.norm(arrival.gradient))
                if len(self.inner.buffer) > before and raw > 0:
                    kept = float(np.linalg.norm(self.inner.buffer[-1].gradient))
                    share = self.inner.k if self.inner.average else 1
                    step = self.inner.learning_rate * self.inner.buffer[-1].weight * kept / share
                    recorder.arrivals[arrival.device_id].append((raw, kept / raw, step))
                return weight

        return Recording(strategy)

    def summary(self, sim: Any) -> dict[str, Any]:
        """Per device (in speed order, fastest first): its labels, arrivals, mean clip ratio and summed
        step; and the per-class recall at each evaluation."""
        devices = []
        for vd in sim.devices:
            seen = self.arrivals.get(vd.device.device_id, [])
            devices.append({
                "labels": [int(c) for c in np.flatnonzero(vd.counts)],
                "arrivals": len(seen),
                "clip_ratio": float(np.mean([s[1] for s in seen])) if seen else None,
                "step": float(np.sum([s[2] for s in seen])),
            })  # fmt: skip
        return {"devices": devices, "recall": self.recall, "times": sim.result.times}


def recording_fleet(
    w: Workload, bench: Any, strategy: Callable[[], Strategy], *, seed: int, recorder: Recorder | None
) -> Any:
    """``w.fleet``; with a recorder, each evaluation also notes the per-class recall."""
    sim = w.fleet(bench, strategy, seed=seed)
    if recorder is None:
        return sim
    evaluate = sim._evaluate

    def evaluate_with_recall() -> None:
        evaluate()
        recall = bench.evaluator.per_class_recall(sim.core.run.served())
        recorder.recall.append([round(float(r), 3) for r in recall])

    sim._evaluate = evaluate_with_recall
    return sim
