"""Bounded windows of recent figures (staleness, weights, batch sizes, task times) and their summary."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from server.core.health import Outcome


@dataclass
class RecentFigures:
    """What the demo and the console chart; bounded so memory stays flat over long runs."""

    staleness: deque[int] = field(default_factory=lambda: deque(maxlen=2000))
    weights: deque[float] = field(default_factory=lambda: deque(maxlen=2000))
    batch_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=2000))
    timings: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=2000))
    rejections: dict[str, int] = field(default_factory=dict)
    declines: dict[str, int] = field(default_factory=dict)  # tasks devices gave back unrun, by their reason
    _declined_at: dict[tuple[str, str], float] = field(default_factory=dict)
    # for the health checks (server/core/health.py): how tasks ended lately, the last push, and since when
    # training runs in this process (no push before then is missing)
    outcomes: deque[Outcome] = field(default_factory=lambda: deque(maxlen=5000))
    last_push_at: float | None = None
    training_since: float | None = None

    def ended(self, device_id: str, ok: bool, now: float) -> None:
        """A task's end: its push taken (``ok``), refused or declined."""
        self.outcomes.append(Outcome(now, device_id, ok))
        if ok:
            self.last_push_at = now

    def declined(self, device_id: str, reason: str, now: float, quiet_s: float = 600.0) -> bool:
        """Count a declined task; True when this device has not declined for this reason in ``quiet_s``
        (the API audits only those: a fleet on terms it cannot run declines at every grant)."""
        self.declines[reason] = self.declines.get(reason, 0) + 1
        self.ended(device_id, False, now)
        last = self._declined_at.get((device_id, reason))
        if last is not None and now - last < quiet_s:
            return False
        if len(self._declined_at) >= 10_000:  # bounded: forget the oldest pair
            del self._declined_at[next(iter(self._declined_at))]
        self._declined_at.pop((device_id, reason), None)
        self._declined_at[(device_id, reason)] = now
        return True

    def summary(self) -> dict[str, Any]:
        staleness = np.array(self.staleness or [0])
        sizes = np.array(self.batch_sizes or [0])
        timings = np.array(self.timings or [(0.0, 0.0)])
        return {
            "staleness_p50": float(np.percentile(staleness, 50)),
            "staleness_p99": float(np.percentile(staleness, 99)),
            "weight_mean": float(np.mean(self.weights)) if self.weights else None,
            "batch_size_min": int(sizes.min()),
            "batch_size_p50": float(np.percentile(sizes, 50)),
            "batch_size_max": int(sizes.max()),
            "rejections": dict(self.rejections),
            "declines": dict(self.declines),
            "predicted_time_ms_p50": float(np.percentile(timings[:, 0], 50)),
            "measured_time_ms_p50": float(np.percentile(timings[:, 1], 50)),
            "time_abs_error_ms_p90": float(np.percentile(np.abs(timings[:, 1] - timings[:, 0]), 90)),
            "tasks_measured": len(self.timings),
        }
