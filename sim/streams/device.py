"""Per-device streams: each device sees only its own events, and trains on a recent window of them.

Online FL's devices train on what they saw lately; data older than the window is dropped (it is stale,
and a phone has little room). One bound, :class:`WindowBound` (at most ``max_size`` examples, none older
than ``max_age_s``), serves two shapes of the same idea:

* :class:`RecentWindow`, a mutable buffer a live device (or a simulated one that receives events one at
  a time) appends to;
* :class:`DeviceStreams`, the stateless view a simulator uses over events generated in advance: the
  window of device ``d`` at time ``t`` is its events in ``(t - max_age_s, t]``, the last ``max_size``
  of them, found by binary search, so a task at any time gets the same data however the simulation
  got there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DeviceStreams", "RecentWindow", "WindowBound"]


@dataclass(frozen=True)
class WindowBound:
    """How much of its own recent data a device keeps."""

    max_size: int = 200
    """At most this many examples (the newest ones)."""
    max_age_s: float = 6 * 3600.0
    """None older than this, in seconds."""


def _draw(n_available: int, batch: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a mini-batch: without replacement, all of the window if it is smaller than ``batch``."""
    if n_available <= batch:
        return np.arange(n_available)
    return np.sort(rng.choice(n_available, size=batch, replace=False))


class RecentWindow:
    """A device's buffer of recent examples under a :class:`WindowBound`."""

    def __init__(self, bound: WindowBound = WindowBound()) -> None:
        self.bound = bound
        self.time = np.empty(0)
        self.X: np.ndarray | None = None
        self.y = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.time.size)

    def extend(self, time: np.ndarray, X: np.ndarray, y: np.ndarray) -> None:
        """Append examples (in time order, not older than the newest already held)."""
        time = np.asarray(time, dtype=float)
        if self.time.size and time.size and time[0] < self.time[-1]:
            raise ValueError("examples must arrive in time order")
        self.time = np.concatenate([self.time, time])[-self.bound.max_size :]
        self.X = (X if self.X is None else np.concatenate([self.X, X]))[-self.bound.max_size :]
        self.y = np.concatenate([self.y, np.asarray(y, dtype=np.int64)])[-self.bound.max_size :]

    def expire(self, now: float) -> None:
        """Drop what is older than ``max_age_s`` at ``now``."""
        keep = np.searchsorted(self.time, now - self.bound.max_age_s, side="right")
        self.time, self.y = self.time[keep:], self.y[keep:]
        if self.X is not None:
            self.X = self.X[keep:]

    def batch(self, size: int, rng: np.random.Generator, now: float) -> tuple[np.ndarray, np.ndarray]:
        """A mini-batch of at most ``size`` examples from the window at ``now``."""
        self.expire(now)
        if self.X is None or not len(self):
            raise LookupError("the window is empty")
        idx = _draw(len(self), size, rng)
        return self.X[idx], self.y[idx]


class DeviceStreams:
    """Events generated in advance, split by device; windows and batches are looked up by time."""

    def __init__(
        self,
        device: np.ndarray,
        time: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        *,
        n_devices: int | None = None,
        bound: WindowBound = WindowBound(),
    ) -> None:
        device = np.asarray(device, dtype=np.int64)
        time = np.asarray(time, dtype=float)
        self.n_devices = int(device.max()) + 1 if n_devices is None else n_devices
        self.bound = bound
        order = np.lexsort((time, device))
        self.device, self.time, self.X, self.y = device[order], time[order], X[order], np.asarray(y)[order]
        self._start = np.searchsorted(self.device, np.arange(self.n_devices + 1))

    @classmethod
    def from_events(
        cls, log: object, *, n_devices: int | None = None, bound: WindowBound = WindowBound()
    ) -> DeviceStreams:
        """One device per user of a recommender :class:`~sim.streams.recommender.EventLog`."""
        return cls(log.user, log.time, log.features, log.item, n_devices=n_devices, bound=bound)  # type: ignore[attr-defined]

    def _range(self, device: int, now: float) -> tuple[int, int]:
        lo, hi = self._start[device], self._start[device + 1]
        times = self.time[lo:hi]
        first = lo + np.searchsorted(times, now - self.bound.max_age_s, side="right")
        last = lo + np.searchsorted(times, now, side="right")
        return max(first, last - self.bound.max_size), last

    def window(self, device: int, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Device ``device``'s window at ``now``: (times, X, y)."""
        lo, hi = self._range(device, now)
        return self.time[lo:hi], self.X[lo:hi], self.y[lo:hi]

    def window_sizes(self, now: float) -> np.ndarray:
        """How many examples each device holds at ``now``: shape ``(n_devices,)``."""
        return np.array([hi - lo for lo, hi in (self._range(d, now) for d in range(self.n_devices))])

    def batch(
        self, device: int, now: float, size: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """A mini-batch of at most ``size`` examples from the window (empty arrays if it is empty)."""
        lo, hi = self._range(device, now)
        idx = lo + _draw(hi - lo, size, rng)
        return self.X[idx], self.y[idx]

    def between(self, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every device's examples with ``t0 <= time < t1``: (device, X, y), e.g. the next hour's test set."""
        mask = (self.time >= t0) & (self.time < t1)
        return self.device[mask], self.X[mask], self.y[mask]
