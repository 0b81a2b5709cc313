"""Token buckets: a device over its request rate gets 429 and a Retry-After (the API), a login over its
rate is refused (the console). Per key, in memory; ``apply_limits`` sets the API's from the settings.
``Backoff`` and ``LoginThrottle``: the console login's growing wait after wrong passwords (issue 29).

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
from typing import Any, Protocol


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


class Backoff:
    """Failures per key → a wait before the next attempt: none for the first ``free`` failures, then 1 s
    doubling with each further one, up to ``cap``. Only failures count, so whoever gets it right is never
    slowed; a key without a failure for ``forget_after`` seconds starts afresh (and is dropped, LRU-bounded
    like the buckets above)."""

    def __init__(
        self,
        *,
        free: int,
        cap: float,
        base: float = 1.0,
        forget_after: float = 86_400.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self.free, self.cap, self.base, self.forget_after = free, cap, base, forget_after
        self.clock = clock
        self.max_keys = max_keys
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # key → (failures, last)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._failures)

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row."""
        if failures < self.free:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(failures - self.free, 64))

    def wait(self, key: str) -> float:
        """0 when ``key`` may try now, else the seconds left of its back-off."""
        with self._lock:
            failures, last = self._failures.get(key, (0, 0.0))
            now = self.clock()
            if not failures or now - last >= self.forget_after:
                return 0.0
            return max(0.0, last + self.delay(failures) - now)

    def fail(self, key: str) -> None:
        with self._lock:
            now = self.clock()
            failures, last = self._failures.pop(key, (0, now))
            self._failures[key] = (1 if now - last >= self.forget_after else failures + 1, now)
            while self._failures:
                _, (_, oldest) = next(iter(self._failures.items()))
                if now - oldest < self.forget_after and len(self._failures) <= self.max_keys:
                    break
                self._failures.popitem(last=False)

    def clear(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


class LoginThrottle:
    """The console login's limits: attempts per address (a token bucket, right or wrong), and a growing
    back-off on failures per user at an address and per address over all users.

    There is deliberately no limit per user over all addresses: that would let anyone lock the admin out
    by failing on purpose from elsewhere. Guessing from many addresses is bounded per address, and by the
    argon2 cost of every guess."""

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        free_failures: int,
        max_backoff: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.attempts = RateLimiter(rate=rate, burst=burst, clock=clock)
        self.by_user = Backoff(free=free_failures, cap=max_backoff, clock=clock)
        # several people may share an address (a NAT): it gets more failures before it waits
        self.by_address = Backoff(free=4 * free_failures, cap=max_backoff, clock=clock)

    @staticmethod
    def _user_key(username: str, address: str) -> str:
        return f"{username}\x00{address}"

    def wait(self, username: str, address: str) -> float:
        """0 to let this attempt through (it spends one of the address's tokens), else seconds to wait."""
        backoff = max(self.by_user.wait(self._user_key(username, address)), self.by_address.wait(address))
        return backoff if backoff > 0 else self.attempts.acquire(address)

    def failed(self, username: str, address: str) -> None:
        self.by_user.fail(self._user_key(username, address))
        self.by_address.fail(address)

    def succeeded(self, username: str, address: str) -> None:
        """The user's own back-off at this address ends (the address's stays: other users' failures)."""
        self.by_user.clear(self._user_key(username, address))


class LimitSettings(Protocol):
    """The settings the API's limiters follow (server/settings.py; a Protocol: no settings import here)."""

    rate_limit_per_second: float
    rate_limit_burst: int
    enroll_rate_per_second: float
    enroll_burst: int
    enroll_key_rate_per_second: float
    enroll_key_burst: int


def apply_limits(state: Any, settings: LimitSettings) -> None:
    """Set the API's limiters (``state``: the app's state) to ``settings``: at start-up, and when the
    console changes them (per device, per enrolling address, per enrollment key)."""
    state.rate_limiter.rate, state.rate_limiter.burst = (
        settings.rate_limit_per_second,
        settings.rate_limit_burst,
    )
    state.enroll_limiter.rate, state.enroll_limiter.burst = (
        settings.enroll_rate_per_second,
        settings.enroll_burst,
    )
    state.enroll_key_limiter.rate = settings.enroll_key_rate_per_second
    state.enroll_key_limiter.burst = settings.enroll_key_burst
