"""Token buckets: a device over its request rate gets 429 and a Retry-After (the API), a login over its
rate is refused (the console). Per key, in memory.

Bounded: a bucket idle long enough to have refilled is the same as no bucket, so buckets are kept in
least-recently-used order and dropped once full again (and, past ``max_buckets``, the oldest is dropped
whatever its level). Memory follows the devices active in the last ``burst / rate`` seconds, not every
device ever seen.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = 100_000,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.max_buckets = max_buckets
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key → (tokens, last)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def acquire(self, key: str) -> float:
        """0 when allowed, else the seconds to wait before the next request would be."""
        with self._lock:
            now = self.clock()
            tokens, last = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
            self._evict(now)
            return 0.0 if allowed else (1.0 - tokens) / self.rate

    def _evict(self, now: float) -> None:
        """Drop the least recently used buckets that have refilled (or that exceed ``max_buckets``)."""
        refill_s = self.burst / self.rate
        while self._buckets:
            key, (_, last) = next(iter(self._buckets.items()))
            if now - last < refill_s and len(self._buckets) <= self.max_buckets:
                return
            del self._buckets[key]
