"""A simulated profiler comparison: test devices request tasks, a dispatcher sizes them, units run them.

Each round visits every test device in a random order; a device idles (think time, exponential with
mean ``mean_gap_s``; it cools), reads its features, gets a batch size from the profiler whose turn it
is, runs the task on its hidden cost model, and every profiler observes the measurement. The records
hold what the figures need, including the hidden true slope for diagnosis (never shown to a profiler).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from profiler.dispatch import RoundRobinDispatcher
from sim.cost import DeviceUnit
from sim.devices import DeviceSpec

__all__ = ["run_trial"]


def run_trial(
    specs: Sequence[DeviceSpec],
    dispatcher: RoundRobinDispatcher,
    *,
    rng: np.random.Generator,
    requests_per_device: int = 14,
    mean_gap_s: float = 5.0,
) -> list[dict[str, Any]]:
    """Run ``requests_per_device`` rounds over ``specs``; one record per task."""
    units = [DeviceUnit(spec, rng) for spec in specs]
    records: list[dict[str, Any]] = []
    for request in range(requests_per_device):
        for i in rng.permutation(len(units)):
            unit = units[i]
            unit.idle(float(rng.exponential(mean_gap_s)))
            features = unit.features()
            name = unit.spec.name
            index = dispatcher.assign(name)
            decision = dispatcher.batch_size_by(index, name, features)
            true_slope = unit.true_slope_ms()
            cost = unit.run_task(decision.batch_size)
            dispatcher.observe(name, features, decision.batch_size, cost.time_ms, cost.energy)
            records.append(
                {
                    "device": name,
                    "request": request,
                    "profiler": dispatcher.names[index],
                    "source": decision.source,
                    "batch_size": decision.batch_size,
                    "predicted_time_ms": decision.predicted_time_ms,
                    "time_ms": cost.time_ms,
                    "predicted_energy": decision.predicted_energy,
                    "energy": cost.energy,
                    "temperature": features["temperature"],
                    "true_slope_ms": true_slope,
                }
            )
    return records
