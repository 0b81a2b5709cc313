"""Group commit: many pushes share one transaction, and each push is acknowledged once it is durable.

The coordinator applies a push in memory under its lock and hands the journal what must be written;
a writer thread takes everything queued (under the same lock, so the snapshot of strategy and
profiler state matches exactly the pushes taken), writes it with bulk statements in one
transaction, commits, and only then releases the waiting pushes. One fsync then covers a whole
batch instead of one push. Task grants ride along without being waited for: a grant lost in a
crash only makes its device ask again. ``durable=False`` (the simulator) writes inline in batches
and never waits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, delete, insert, update
from sqlalchemy.orm import Session, sessionmaker

from server.store import repository as repo
from server.store.tables import MeasurementRow, ModelRow, TaskRow, VersionRow

log = logging.getLogger("fleet.server")


@dataclass
class Answer:
    """Everything one acknowledged push writes."""

    task: dict[str, Any]  # the tasks-table columns that change: id, status, digest, outcome, …
    measurement: dict[str, Any]
    version: tuple[str, int, bytes] | None = None  # (model_id, version, float32 parameters)


@dataclass
class State:
    """What is persisted once per batch: the newest strategy and profiler state."""

    model_id: str | None = None
    strategy: dict[str, Any] | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)


class Ticket:
    """Released when the push it stands for is durable (or its batch failed)."""

    def __init__(self, done: bool = False) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()
        self.error: BaseException | None = None
        if done:
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def release(self, error: BaseException | None = None) -> None:
        with self._guard:
            self.error = error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_release(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the writer's thread) once released, or now if it already is: lets an
        event loop await durability without parking a thread per push."""
        with self._guard:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = 60.0) -> None:
        if not self._event.wait(timeout):
            raise TimeoutError("the push was not committed in time")
        if self.error is not None:
            raise self.error


@dataclass
class _Batch:
    grants: list[dict[str, Any]] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    other: list[Callable[[Session], None]] = field(default_factory=list)
    tickets: list[Ticket] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.grants or self.answers or self.other)


class Journal:
    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        lock: threading.RLock,
        snapshot: Callable[[], State],
        on_failure: Callable[[BaseException], None],
        clock: Callable[[], float],
        version_retention: int,
        durable: bool = True,
        inline_batch: int = 64,
    ) -> None:
        self.sessions = sessions
        self.lock = lock
        self.snapshot = snapshot
        self.on_failure = on_failure
        self.clock = clock
        self.version_retention = version_retention
        self.durable = durable
        self.inline_batch = inline_batch
        self._batch = _Batch()
        self._writing = threading.Lock()
        self._wake = threading.Condition(threading.Lock())
        self._closed = False
        self._thread: threading.Thread | None = None
        if durable:
            self._thread = threading.Thread(target=self._run, name="fleet-journal", daemon=True)
            self._thread.start()

    # -- producers (called under the coordinator's lock) ----------------------------------------
    def grant(self, row: dict[str, Any]) -> None:
        self._batch.grants.append(row)
        self._kick()

    def other(self, work: Callable[[Session], None]) -> Ticket:
        """A rare write that must stay in order with the pushes (status changes, counters)."""
        self._batch.other.append(work)
        ticket = Ticket(done=not self.durable)
        self._batch.tickets.append(ticket)
        self._kick()
        return ticket

    def answer(self, answer: Answer) -> Ticket:
        self._batch.answers.append(answer)
        ticket = Ticket(done=not self.durable)
        self._batch.tickets.append(ticket)
        self._kick()
        return ticket

    def _kick(self) -> None:
        if not self.durable:
            if len(self._batch.answers) + len(self._batch.grants) >= self.inline_batch:
                self.flush()
            return
        with self._wake:
            self._wake.notify()

    # -- the writer ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write what is queued now, in the caller's thread (never while holding the coordinator's lock
        in durable mode: the writer thread takes it too). Batches are written one at a time, in order."""
        with self._writing:
            with self.lock:
                batch, self._batch = self._batch, _Batch()
                state = self.snapshot()
            if batch:
                self._write(batch, state)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._batch and not self._closed:
                    self._wake.wait(0.5)
                if self._closed and not self._batch:
                    return
            self.flush()

    def _write(self, batch: _Batch, state: State) -> None:
        try:
            with self.sessions.begin() as session:
                write_batch(session, batch, state, now=self.clock(), retention=self.version_retention)
        except BaseException as exc:  # nothing of this batch is durable: fail its pushes, resync memory
            log.exception("journal commit of %d pushes failed", len(batch.answers))
            with self.lock:  # resync memory before any waiting push learns of the failure
                dropped, self._batch = self._batch, _Batch()
                self.on_failure(exc)
            for ticket in batch.tickets + dropped.tickets:
                ticket.release(exc)
            return
        for ticket in batch.tickets:
            ticket.release()

    def close(self) -> None:
        """Write what is left and stop the writer."""
        if self._thread is not None:
            with self._wake:
                self._closed = True
                self._wake.notify()
            self._thread.join(timeout=30)
        self.flush()


def write_batch(session: Session, batch: _Batch, state: State, *, now: float, retention: int) -> None:
    """One batch as bulk statements: grants, other writes, answers, measurements, versions, state."""
    tasks, versions_table = TaskRow.__table__, VersionRow.__table__
    db = session.connection()  # Core statements on the connection: no ORM bookkeeping per statement
    if batch.grants:
        db.execute(insert(tasks), batch.grants)
    for work in batch.other:
        work(session)
    if batch.answers:
        answer = update(tasks).where(tasks.c.id == bindparam("task_id"))
        db.execute(
            answer,
            [
                {**{k: v for k, v in a.task.items() if k != "id"}, "task_id": a.task["id"]}
                for a in batch.answers
            ],
        )
        db.execute(insert(MeasurementRow.__table__), [a.measurement for a in batch.answers])
        versions = [a.version for a in batch.answers if a.version is not None]
        if versions:
            db.execute(
                insert(versions_table),
                [{"model_id": m, "version": v, "params": p, "created_at": now} for m, v, p in versions],
            )
            model_id, newest = versions[-1][0], versions[-1][1]
            db.execute(
                update(ModelRow.__table__)
                .where(ModelRow.__table__.c.id == model_id)
                .values(current_version=newest)
            )
            db.execute(
                delete(versions_table).where(
                    versions_table.c.model_id == model_id,
                    versions_table.c.version > 0,
                    versions_table.c.version <= newest - retention,
                )
            )
    if state.model_id is not None and state.strategy is not None and (batch.answers or batch.other):
        repo.save_strategy_state(session=session, model_id=state.model_id, state=state.strategy, now=now)
    repo.save_profiler_states(session=session, states=state.profiles, now=now)
