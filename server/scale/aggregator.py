"""The aggregator: the one process that applies pushes, in queue order, with the configured strategy.

Its core is a plain ``Coordinator`` (server/compose.py builds it with ``TRUSTED`` checks and the default
``ApplyNow`` sink); what is the aggregator's own is here: the fenced store, the lease, the drain loop.

It takes the aggregator lease (a fencing token) before it loads any state, and every transaction it
writes ends by checking that token (``Fenced``): a second aggregator started by mistake waits for the
lease, and one that lost it (paused past its lease, then resumed) rolls back and exits. Each batch of
queued pushes is applied in memory and committed together with the deletion of their queue rows, the
strategy and profiler state and the newest version, so a crash leaves every push either queued or
applied, never both (docs/scale-out.md)."""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from secrets import token_hex
from typing import Any

from server.core.coordinator import Coordinator
from server.core.errors import CoordinatorError, LeaseLost, StateBehind, StorageUnavailable
from server.core.events import Event, Fenced, PushApplied, PushDropped
from server.core.journal import Ticket
from server.core.leases import Lease
from server.core.pushes import queued_result
from server.scale.announce import VersionAnnouncer
from server.store.queue import QueuedPush
from server.store.sql import SqlStore

log = logging.getLogger("fleet.server")


class AggregatorStore:
    """The SQL store as the aggregator writes it: each commit fenced by the lease's token, only the
    newest of a batch's versions stored (workers serve only announced versions), then announced."""

    def __init__(
        self, inner: SqlStore, *, holder: str, token: int, ttl: float, announcer: VersionAnnouncer | None
    ) -> None:
        self.inner, self.holder, self.token, self.ttl, self.announcer = inner, holder, token, ttl, announcer
        self.committed_at = time.time()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, events: Sequence[Event]) -> None:
        newest = max(
            (i for i, e in enumerate(events) if isinstance(e, PushApplied) and e.new_version is not None),
            default=None,
        )
        thinned = [
            replace(e, new_version=None)
            if isinstance(e, PushApplied) and e.new_version is not None and i != newest
            else e
            for i, e in enumerate(events)
        ]
        now = time.time()
        self.inner.commit([*thinned, Fenced(self.holder, self.token, now + self.ttl)])
        self.committed_at = now
        if newest is not None and self.announcer is not None:
            version = events[newest].new_version  # type: ignore[union-attr]
            self.announcer.announce(version.model_id, version.version)


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{token_hex(3)}"


def take_lease(store: SqlStore, holder: str, ttl: float, stop: threading.Event) -> int | None:
    """Wait for the aggregator lease; the fencing token, or None if asked to stop first."""
    waited = False
    while not stop.is_set():
        try:
            token = store.take_aggregator_lease(holder, now=time.time(), ttl=ttl)
        except StorageUnavailable:  # the row is locked by a holder that paused mid-transaction, or a blip
            token = None
        if token is not None:
            log.info("aggregator %s holds the lease (token %d)", holder, token)
            return token
        if not waited:
            log.warning("another aggregator holds the lease; waiting for it to lapse")
            waited = True
        stop.wait(ttl / 4)
    return None


def apply_queued(aggregator: Coordinator, pushes: Sequence[QueuedPush]) -> Ticket | None:
    """Apply ``pushes`` in order through the aggregator's core (built with ``TRUSTED`` checks: an API
    worker checked each push before queueing it); the last one's ticket (released once the batch is
    durable). A push the run can no longer take (finished, superseded) leaves the queue as dropped."""

    def dropped(lease: Lease, queue_id: int, error: CoordinatorError) -> PushDropped:
        log.warning("dropping queued push %s: %s", lease.task_id, error)
        return PushDropped(lease.task_id, queue_id, str(error)[:200], aggregator.clock())

    run = aggregator.run
    ahead = [p.lease.version for p in pushes if run is not None and p.lease.model_id == run.model_id]
    if ahead and max(ahead) > run.version:  # checked before any is applied: none of the batch is
        raise StateBehind(f"a queued push on version {max(ahead)}, beyond this aggregator's {run.version}")
    answers = [
        (
            replace(push.lease, deadline=math.inf),  # live when a worker queued it: no expiry in the queue
            queued_result(push.meta, push.gradient, push.digest),
            push.queue_id,
        )
        for push in pushes
    ]
    return aggregator.take(answers, dropped)


def lease_lost(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, LeaseLost):
            return True
        error = error.__cause__
    return False


def apply_or_stop(
    aggregator: Coordinator, store: AggregatorStore, pushes: Sequence[QueuedPush], settle: Callable[[], bool]
) -> Ticket | None:
    """``apply_queued``, unless a push answers a version this aggregator never made: another aggregator
    applied pushes while this one was paused past its lease. Then the pending batch (``settle``) or a
    fenced commit says so (``LeaseLost``); if it still holds the lease, its state and storage disagree
    and it must not go on either."""
    try:
        return apply_queued(aggregator, pushes)
    except StateBehind as error:
        settle()
        try:
            store.commit([])
        except StorageUnavailable as exc:
            raise LeaseLost(f"{error}, and the lease cannot be checked ({exc})") from error
        raise RuntimeError(
            f"{error}, yet this aggregator holds the lease: state and storage disagree"
        ) from error


def read_queue(store: AggregatorStore, batch: int, after: int, stop: threading.Event) -> list[QueuedPush]:
    """The next queued pushes; none, after a pause, when the read failed: a blip, or this process paused
    mid-read past its lease and PostgreSQL ended its session. Either way the drain goes on; the next
    fenced commit, not this error, tells whether it may (``LeaseLost``)."""
    try:
        return store.queued(batch, after=after)
    except StorageUnavailable as exc:
        log.warning("cannot read the queue (%s); retrying", exc)
        stop.wait(0.5)
        return []


def renew_lease(store: AggregatorStore) -> None:
    """An empty fenced commit: renews the lease, or raises ``LeaseLost``; a failed one is retried later."""
    try:
        store.commit([])
    except StorageUnavailable as exc:
        log.warning("cannot renew the lease (%s); retrying", exc)


def drain(
    aggregator: Coordinator,
    store: AggregatorStore,
    *,
    batch: int,
    stop: threading.Event,
    idle_max_s: float = 0.05,
    rescan_every: int = 8,
    linger_s: float = 0.01,
) -> int:
    """Apply the queue until ``stop``; returns the number of pushes applied. Raises ``LeaseLost`` when
    another aggregator took over (nothing of this one's uncommitted batches was committed).

    Pipelined: while one batch commits, the next (ids above it) is read and applied. Rows committed late
    with a lower id (a slow worker transaction) are picked up by a rescan from the start, done once the
    pipeline is empty: when the queue's tail is reached, and every ``rescan_every`` batches. After a
    batch that emptied the queue it waits ``linger_s``, so that a light load still makes batches of
    several pushes (an acknowledgement does not wait for it: pushes are answered once queued)."""
    applied, idle, after, since_rescan = 0, 0.001, 0, 0
    pending: tuple[Ticket, int] | None = None  # the last batch applied, not known durable yet

    def settle() -> bool:
        """Wait for the pending batch; False if it failed (memory was reloaded: rescan from the start)."""
        nonlocal pending, applied
        if pending is None:
            return True
        ticket, size = pending
        pending = None
        try:
            ticket.wait(timeout=120.0)
        except Exception as exc:
            if lease_lost(exc):
                raise LeaseLost(str(exc)) from exc
            log.warning("a batch of %d queued pushes did not commit (%s); they stay queued", size, exc)
            stop.wait(0.5)
            return False
        applied += size
        return True

    while not stop.is_set():
        pushes = read_queue(store, batch, after, stop)
        if len(pushes) < batch or since_rescan >= rescan_every:
            settle()
            after, since_rescan = 0, 0
        if not pushes:
            if time.time() - store.committed_at > store.ttl / 3:
                renew_lease(store)
            stop.wait(idle)
            idle = min(idle * 2, idle_max_s)
            continue
        idle = 0.001
        ticket = apply_or_stop(aggregator, store, pushes, settle)
        committed = settle()
        if ticket is not None:
            pending = (ticket, len(pushes))
            after, since_rescan = pushes[-1].queue_id, since_rescan + 1
        if not committed:  # let this batch finish too (committed, or failed and still queued), then rescan
            settle()
            after, since_rescan = 0, 0
        elif len(pushes) < batch:
            stop.wait(linger_s)
    settle()
    return applied
