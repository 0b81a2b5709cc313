"""Per-device sets of disjoint time intervals, queried for many devices and times at once.

The diurnal model (sim/diurnal.py) and the FedScale trace loader describe a device's day as intervals
(app sessions, charging windows). An experiment asks "which of 1,000 devices is in use at t?" thousands
of times, so the intervals of all devices live in one sorted array keyed by ``device * span + time``:
one ``searchsorted`` answers a whole fleet's query without a Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["IntervalSet"]


@dataclass(frozen=True)
class IntervalSet:
    """Disjoint ``[start, end)`` intervals per device, in seconds, sorted by (device, start).

    Build it with :meth:`from_arrays`, which sorts and merges overlapping intervals of a device.
    """

    n_devices: int
    device: np.ndarray  # int64, one per interval
    start: np.ndarray  # float64
    end: np.ndarray  # float64
    origin: float  # every time is > origin; keys are offset by it so they stay positive
    span: float  # every time is < origin + span

    @classmethod
    def from_arrays(
        cls, n_devices: int, device: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> IntervalSet:
        device = np.asarray(device, dtype=np.int64)
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        if not (device.shape == start.shape == end.shape):
            raise ValueError("device, start and end must have one shape")
        if np.any(end < start):
            raise ValueError("an interval ends before it starts")
        if device.size and (device.min() < 0 or device.max() >= n_devices):
            raise ValueError("a device index is out of range")
        keep = end > start
        device, start, end = device[keep], start[keep], end[keep]
        origin = float(start.min()) - 1.0 if start.size else 0.0
        span = float(end.max() - origin) + 2.0 if end.size else 2.0
        order = np.lexsort((start, device))
        device, start, end = device[order], start[order], end[order]
        if start.size:
            key_start = device * span + (start - origin)
            key_end = np.maximum.accumulate(device * span + (end - origin))
            new = np.ones(start.size, dtype=bool)
            new[1:] = key_start[1:] > key_end[:-1]  # does not touch the running union of the ones before
            first = np.flatnonzero(new)
            end = np.maximum.reduceat(end, first)
            device, start = device[first], start[first]
        return cls(n_devices, device, start, end, origin, span)

    def _last_started(self, device: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of each query's device's last interval starting at or before ``t``, and whether it exists."""
        tt = np.clip(t - self.origin, 0.0, self.span)
        keys = self.device * self.span + (self.start - self.origin)
        idx = np.searchsorted(keys, device * self.span + tt, side="right") - 1
        safe = np.maximum(idx, 0)
        found = (idx >= 0) & (self.device[safe] == device) & (t >= self.origin) if idx.size else idx >= 0
        return safe, found

    def contains(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        """Whether ``t`` lies in one of ``device``'s intervals (arrays broadcast)."""
        device, t = np.broadcast_arrays(np.asarray(device, dtype=np.int64), np.asarray(t, dtype=float))
        if not self.start.size:
            return np.zeros(device.shape, dtype=bool)
        idx, found = self._last_started(device.ravel(), t.ravel())
        return (found & (self.end[idx] > t.ravel())).reshape(device.shape)

    def ended_within(self, device: np.ndarray | int, t: np.ndarray | float, grace: float) -> np.ndarray:
        """Whether one of ``device``'s intervals covers some instant of ``[t - grace, t]``."""
        device, t = np.broadcast_arrays(np.asarray(device, dtype=np.int64), np.asarray(t, dtype=float))
        if not self.start.size:
            return np.zeros(device.shape, dtype=bool)
        idx, found = self._last_started(device.ravel(), t.ravel())
        return (found & (self.end[idx] > t.ravel() - grace)).reshape(device.shape)

    def of(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """``device``'s intervals: (starts, ends), sorted."""
        lo, hi = np.searchsorted(self.device, [device, device + 1])
        return self.start[lo:hi], self.end[lo:hi]

    def total(self, t0: float, t1: float) -> np.ndarray:
        """Seconds each device spends inside its intervals during ``[t0, t1)``: shape ``(n_devices,)``."""
        overlap = np.clip(np.minimum(self.end, t1) - np.maximum(self.start, t0), 0.0, None)
        return np.bincount(self.device, weights=overlap, minlength=self.n_devices)
