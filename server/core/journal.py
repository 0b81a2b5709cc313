"""Group commit: many pushes share one transaction, and each push is acknowledged once it is durable.

The coordinator applies a push in memory under its lock and appends the push's events here; a writer
thread takes what is queued, writes it through the ``Store`` port in one transaction (``Store.commit``),
and only then releases the waiting pushes. One fsync then covers a whole batch instead of one push.
Task grants ride along without being waited for: a grant lost in a crash only makes its device ask
again. ``durable=False`` (the simulator) writes inline in batches and never waits.

Locks. The journal guards its queue with its own lock and never takes the coordinator's. Each batch
ends with a ``StateCheckpoint`` (strategy and profiler state) that must reflect exactly the pushes in
the batch. The guarantee: the coordinator appends events only while holding its lock, in the same
critical section that changes the state; ``checkpoint()`` (the coordinator's) takes that lock,
snapshots the state and reads ``appended`` — the sequence number of the last event appended, so the
snapshot reflects events 1..appended and nothing later. The writer then takes from the queue exactly
the events up to that number. Events appended after the snapshot stay queued for the next batch. Lock
order is always coordinator → journal (producers) or one at a time (the writer), so no deadlock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from server.core.errors import StorageUnavailable
from server.core.events import (
    EvaluationRecorded,
    Event,
    PushApplied,
    StateCheckpoint,
    TaskGranted,
    VersionNoted,
)
from server.core.ports import Store

log = logging.getLogger("fleet.server")


class Ticket:
    """Released when the push it stands for is durable (or its batch failed).

    The ``threading.Event`` is made only when someone waits: most tickets are awaited through
    ``on_release`` (the async route) or not at all (the aggregator waits for a batch's last one), and
    making an Event per push was a measurable part of the aggregator's time."""

    def __init__(self, done: bool = False) -> None:
        self._guard = threading.Lock()
        self._event: threading.Event | None = None
        self._done = done
        self._callbacks: list[Callable[[], None]] = []
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done

    def release(self, error: BaseException | None = None) -> None:
        with self._guard:
            self.error = error
            self._done = True
            event, callbacks, self._callbacks = self._event, self._callbacks, []
        if event is not None:
            event.set()
        for callback in callbacks:
            callback()

    def on_release(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the writer's thread) once released, or now if it already is: lets an
        event loop await durability without parking a thread per push."""
        with self._guard:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = 60.0) -> None:
        with self._guard:
            if not self._done and self._event is None:
                self._event = threading.Event()
            event = None if self._done else self._event
        if event is not None and not event.wait(timeout):
            raise TimeoutError("the push was not committed in time")
        if self.error is not None:
            raise self.error


def _release(tickets: list[Ticket], error: BaseException) -> None:
    for ticket in tickets:
        ticket.release(error)


@dataclass
class _Queued:
    seq: int
    event: Event
    ticket: Ticket | None
    at: float  # when it was queued (``backlog``)


# events that update a version's row: written after the answers, one of which may be what creates it
ABOUT_A_VERSION = (EvaluationRecorded, VersionNoted)


@dataclass
class Batch:
    """What one transaction writes: grants first, then other writes in order, then answers, then the
    writes about a version (an evaluation's kept parameters, a note), which a push of this batch may
    have made."""

    grants: list[TaskGranted] = field(default_factory=list)
    answers: list[PushApplied] = field(default_factory=list)
    other: list[Event] = field(default_factory=list)
    about_versions: list[Event] = field(default_factory=list)
    tickets: list[Ticket] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.grants or self.answers or self.other or self.about_versions)

    def add(self, event: Event) -> None:
        if isinstance(event, TaskGranted):
            self.grants.append(event)
        elif isinstance(event, PushApplied):
            self.answers.append(event)
        elif isinstance(event, ABOUT_A_VERSION):
            self.about_versions.append(event)
        else:
            self.other.append(event)

    def events(self, state: StateCheckpoint) -> list[Event]:
        """The batch in write order, closed by the state checkpoint (strategy state only with news)."""
        if not (self.answers or self.other or self.about_versions):
            state = StateCheckpoint(profiles=state.profiles, at=state.at)
        return [*self.grants, *self.other, *self.answers, *self.about_versions, state]


class Journal:
    def __init__(
        self,
        *,
        store: Store,
        checkpoint: Callable[[], tuple[StateCheckpoint, int]],
        on_failure: Callable[[BaseException], list[Ticket]],
        reload: Callable[[], list[Ticket]],
        durable: bool = True,
        inline_batch: int = 64,
        grant_linger_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.checkpoint = checkpoint
        self.on_failure = on_failure
        self.reload = reload
        self.durable = durable
        self.inline_batch = inline_batch
        self.grant_linger_s = grant_linger_s
        self.clock = clock
        self._queue: list[_Queued] = []
        self._inflight: tuple[int, float] | None = None  # the batch being written: (events, oldest at)
        self._appended = 0
        self._lock = threading.Lock()  # the queue's own lock
        self._writing = threading.Lock()  # one batch at a time, in order
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread: threading.Thread | None = None
        if durable:
            self._thread = threading.Thread(target=self._run, name="fleet-journal", daemon=True)
            self._thread.start()

    def backlog(self) -> tuple[int, float | None]:
        """(writes not yet committed, when the oldest of them was queued): the health check's view of a
        slow or hung database, before any push times out (server/core/health.py)."""
        with self._lock:
            count = len(self._queue) + (self._inflight[0] if self._inflight else 0)
            times = [q.at for q in self._queue[:1]] + ([self._inflight[1]] if self._inflight else [])
        return count, min(times, default=None)

    @property
    def appended(self) -> int:
        """Sequence number of the last event appended (read by ``checkpoint`` under the core's lock)."""
        return self._appended

    # -- producers -------------------------------------------------------------------------------
    def grant(self, event: TaskGranted) -> None:
        """Queue a grant; nobody waits for it."""
        self._append(event, None)

    def record(self, event: Event) -> Ticket:
        """Queue a write that must stay in order with the pushes; the ticket is released once durable."""
        ticket = Ticket(done=not self.durable)
        self._append(event, ticket)
        return ticket

    def _append(self, event: Event, ticket: Ticket | None) -> None:
        with self._lock:
            self._appended += 1
            self._queue.append(_Queued(self._appended, event, ticket, self.clock()))
            pending = len(self._queue)
            self._wake.notify()
        if not self.durable and pending >= self.inline_batch:
            self.flush()

    # -- the writer ------------------------------------------------------------------------------
    def _take(self, through: int) -> Batch:
        with self._lock:
            cut = next((i for i, q in enumerate(self._queue) if q.seq > through), len(self._queue))
            taken, self._queue = self._queue[:cut], self._queue[cut:]
            self._inflight = (len(taken), taken[0].at) if taken else None
        batch = Batch()
        for queued in taken:
            batch.add(queued.event)
            if queued.ticket is not None:
                batch.tickets.append(queued.ticket)
        return batch

    def flush(self) -> None:
        """Write what is queued now, in the caller's thread (in durable mode, never while holding the
        coordinator's lock: it would hold up every push for one fsync). One batch at a time, in order."""
        with self._writing:
            state, through = self.checkpoint()
            batch = self._take(through)
            try:
                if batch or state.profiles:
                    self._write(batch, state)
            finally:
                with self._lock:
                    self._inflight = None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._wake.wait(0.5)
                if self._closed and not self._queue:
                    return
                # nobody waits for grants: let them gather for up to grant_linger_s, until a write that
                # someone awaits arrives (one commit per grant was most of the scale-out's transactions)
                linger_until = time.monotonic() + self.grant_linger_s
                while not self._closed and all(q.ticket is None for q in self._queue):
                    left = linger_until - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
            try:
                self.flush()
            except Exception:  # the writer must outlive any one batch (its tickets are already failed)
                log.exception("journal writer: flush failed")

    def _write(self, batch: Batch, state: StateCheckpoint) -> None:
        try:
            self.store.commit(batch.events(state))
        except Exception as exc:  # nothing of this batch is durable: fail its pushes, resync memory
            log.exception("journal commit of %d pushes failed", len(batch.answers))
            failure = StorageUnavailable(f"the commit failed: {exc}")
            failure.__cause__ = exc
            self._recover(failure, batch.tickets + self.on_failure(exc))  # + the tickets it discarded
            return
        for ticket in batch.tickets:
            ticket.release()

    def _recover(self, failure: StorageUnavailable, tickets: list[Ticket], *, max_delay: float = 2.0) -> None:
        """Reload the durable state, retrying with backoff while storage stays unreachable (the
        coordinator answers 503 meanwhile), and fail ``tickets``: after the first reload (a passing
        fault then leaves nothing behind for a retry to meet) or at once when it fails. Inline
        (simulator) journals try once."""
        delay = 0.05
        while True:
            try:
                tickets = tickets + self.reload()
            except Exception as exc:
                _release(tickets, failure)
                tickets = []
                if not self.durable or self._closed:
                    raise
                log.warning("storage still unavailable (%s); retrying in %.2f s", exc, delay)
                time.sleep(delay)
                delay = min(2 * delay, max_delay)
                continue
            _release(tickets, failure)
            return

    def discard(self) -> list[Ticket]:
        """Drop everything queued (after a failed commit memory is reloaded from storage); returns the
        tickets to fail."""
        with self._lock:
            dropped, self._queue = self._queue, []
        return [q.ticket for q in dropped if q.ticket is not None]

    def close(self) -> None:
        """Write what is left and stop the writer."""
        if self._thread is not None:
            with self._lock:
                self._closed = True
                self._wake.notify()
            self._thread.join(timeout=30)
        self.flush()
