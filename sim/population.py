"""Timing models of a heterogeneous fleet, kept apart from the event loop (FLSim's pattern).

Speed classes span the thesis's Galaxy S6 (7.11 GFLOP/s) to S10 (51.4 GFLOP/s), a 7.2x spread; a task's
compute time grows linearly with the mini-batch, with per-task jitter. Network latency is lognormal per
transfer. Availability: online sessions and offline gaps are exponential; at the end of a session a
device churns (leaves for good, and a new device with a fresh shard joins) with ``churn`` probability.
A device finishes a task it started before it goes offline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPEED_CLASSES: tuple[tuple[str, float], ...] = (
    ("Galaxy S6", 7.11),
    ("Galaxy S7", 11.0),
    ("Galaxy S8", 16.5),
    ("Galaxy S9", 24.0),
    ("Pixel 3", 31.0),
    ("Pixel 4", 40.0),
    ("Galaxy S10", 51.4),
)


@dataclass(frozen=True)
class FleetTiming:
    """All the fleet's timing knobs, in seconds."""

    flops_per_sample: float = (
        4.0e8  # a forward + backward pass of the thesis's CNN on a phone, incl. overheads
    )
    jitter: float = 0.1  # relative std of compute time per task
    latency_median: float = 0.3
    latency_sigma: float = 0.5
    mean_online: float = 600.0
    mean_offline: float = 900.0
    churn: float = 0.05

    def compute_seconds(self, batch: int, gflops: float, rng: np.random.Generator) -> float:
        base = batch * self.flops_per_sample / (gflops * 1e9)
        return base * max(0.2, 1.0 + self.jitter * rng.standard_normal())

    def latency(self, rng: np.random.Generator) -> float:
        return float(self.latency_median * np.exp(self.latency_sigma * rng.standard_normal()))

    def session(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(self.mean_online))

    def gap(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(self.mean_offline))


def speed_class(rng: np.random.Generator) -> tuple[str, float]:
    """A device model and its GFLOP/s, uniformly over the classes."""
    return SPEED_CLASSES[int(rng.integers(len(SPEED_CLASSES)))]
