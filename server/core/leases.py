"""Task leases in memory, so a push needs no database read; storage is the fallback after a restart."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from server.core.ports import Lease

__all__ = ["Lease", "LeaseBook"]


class LeaseBook:
    """Open leases by id, plus a bounded window of answered ones for idempotent retries.

    The window is what a coordinator's memory grows by until it is full (a soak measured ~1.2 KB a
    lease before answered leases dropped their features): 10,000 covers minutes of pushes, and a retry
    of anything older is answered from storage.

    Memory only: a lease that is not here (granted before a restart, or answered long ago) is read from
    storage by the coordinator *before* it takes its lock (``Coordinator.submit_nowait``), so the async
    push route never waits on the database under the global lock."""

    def __init__(self, *, answered_window: int = 10_000) -> None:
        self.answered_window = answered_window
        self._open: dict[str, Lease] = {}
        self._answered: OrderedDict[str, Lease] = OrderedDict()

    def add(self, lease: Lease) -> None:
        self._open[lease.task_id] = lease

    def get(self, task_id: str) -> Lease | None:
        return self._open.get(task_id) or self._answered.get(task_id)

    def adopt(self, lease: Lease) -> Lease:
        """The lease of a stored task, kept from now on (unless memory learned of it meanwhile)."""
        known = self.get(lease.task_id)
        if known is not None:
            return known
        if lease.status in ("applied", "queued", "dropped"):  # answered (scale-out: queued, or dropped)
            self._remember_answered(lease)
        elif lease.status == "open":
            self._open[lease.task_id] = lease
        return lease

    def answered(self, lease: Lease, digest: str, outcome: dict[str, Any]) -> None:
        lease.status, lease.digest, lease.outcome = "applied", digest, outcome
        self._open.pop(lease.task_id, None)
        self._remember_answered(lease)

    def _remember_answered(self, lease: Lease) -> None:
        lease.features = {}  # a retry needs only the owner, digest and answer
        self._answered[lease.task_id] = lease
        while len(self._answered) > self.answered_window:
            self._answered.popitem(last=False)

    def expire(self, now: float) -> None:
        """Forget open leases past their deadline (their rows are marked expired in storage)."""
        for task_id in [t for t, lease in self._open.items() if lease.deadline < now]:
            del self._open[task_id]
