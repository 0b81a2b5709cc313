"""The scale-out queue's SQL (docs/scale-out.md): API workers insert validated pushes, the aggregator
reads them oldest first and deletes each in the transaction that applies it; its lease fences it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from server.core.errors import LeaseLost
from server.core.events import Fenced, PushDropped, PushQueued
from server.core.ports import Lease
from server.store.tables import AggregatorLeaseRow, QueuedPushRow, TaskRow

QUEUE, LEASE, TASKS = QueuedPushRow.__table__, AggregatorLeaseRow.__table__, TaskRow.__table__


@dataclass(frozen=True)
class QueuedPush:
    """A queued push with the lease it answers, as the aggregator reads it."""

    queue_id: int
    lease: Lease
    digest: str
    meta: dict[str, Any]
    gradient: bytes


def _insert_ignoring_duplicates(db: Connection) -> Any:
    """INSERT … ON CONFLICT (task_id) DO NOTHING: a retry that reached another worker queues nothing twice."""
    dialect = postgresql if db.dialect.name == "postgresql" else sqlite
    return dialect.insert(QUEUE).on_conflict_do_nothing(index_elements=["task_id"])


def write_queued(session: Session, pushes: Sequence[PushQueued]) -> None:
    db = session.connection()
    db.execute(
        _insert_ignoring_duplicates(db),
        [
            {
                "task_id": p.task_id,
                "digest": p.digest,
                "meta": p.meta,
                "gradient": p.gradient,
                "enqueued_at": p.at,
            }
            for p in pushes
        ],
    )
    db.execute(
        update(TASKS).where(TASKS.c.id == bindparam("task"), TASKS.c.status != "applied"),
        [
            {
                "task": p.task_id,
                "status": "queued",
                "digest": p.digest,
                "outcome": p.outcome,
                "answered_at": p.at,
            }
            for p in pushes
        ],
    )


def delete_applied(db: Connection, queue_ids: list[int]) -> None:
    if queue_ids:
        db.execute(delete(QUEUE).where(QUEUE.c.id.in_(queue_ids)))


def write_dropped(session: Session, event: PushDropped) -> None:
    db = session.connection()
    delete_applied(db, [event.queue_id])
    db.execute(
        update(TASKS).where(TASKS.c.id == event.task_id).values(status="dropped", answered_at=event.at)
    )


def check_fence(session: Session, event: Fenced) -> None:
    """Extend the lease if ``event.token`` still holds it; otherwise roll the whole transaction back."""
    result = session.connection().execute(
        update(LEASE)
        .where(LEASE.c.id == 1, LEASE.c.token == event.token, LEASE.c.holder == event.holder)
        .values(expires_at=event.expires_at)
    )
    if result.rowcount != 1:
        raise LeaseLost(f"aggregator lease token {event.token} is no longer current")


def take_lease(session: Session, *, holder: str, now: float, ttl: float) -> int | None:
    """The next fencing token if the lease is free, expired or already ours; None while another holds it."""
    db = session.connection()
    row = db.execute(select(LEASE).where(LEASE.c.id == 1).with_for_update()).first()
    if row is None:
        db.execute(insert(LEASE).values(id=1, holder=holder, token=1, expires_at=now + ttl))
        return 1
    if row.expires_at >= now and row.holder != holder:
        return None
    token = int(row.token) + 1
    db.execute(update(LEASE).where(LEASE.c.id == 1).values(holder=holder, token=token, expires_at=now + ttl))
    return token


def queued(session: Session, *, limit: int, after: int = 0) -> list[QueuedPush]:
    """The oldest queued pushes (with an id above ``after``) with their leases, in queue order."""
    t = TASKS.c
    columns = (t.model_id, t.device_id, t.device_model, t.version, t.batch_size, t.features, t.deadline)
    query = (
        select(QUEUE.c.id, QUEUE.c.task_id, QUEUE.c.digest, QUEUE.c.meta, *columns)
        .add_columns(t.predicted_time_ms, t.predicted_energy)
        .join(TASKS, t.id == QUEUE.c.task_id)
        .where(QUEUE.c.id > after)
        .order_by(QUEUE.c.id)
        .limit(limit)
    )
    rows = session.execute(query).all()
    gradients = _gradients(session, [row.id for row in rows])
    return [
        QueuedPush(
            queue_id=row.id,
            lease=Lease(
                task_id=row.task_id,
                model_id=row.model_id,
                device_id=row.device_id,
                device_model=row.device_model,
                version=row.version,
                batch_size=row.batch_size,
                features=dict(row.features),
                predicted_time_ms=row.predicted_time_ms,
                predicted_energy=row.predicted_energy,
                deadline=row.deadline,
            ),
            digest=row.digest,
            meta=dict(row.meta),
            gradient=gradients[row.id],
        )
        for row in rows
    ]


def _gradients(session: Session, ids: list[int]) -> dict[int, bytes]:
    """The rows' gradients. On PostgreSQL in binary format: psycopg reads bytea as hex text otherwise,
    which doubled the bytes and cost most of the aggregator's read time (docs/results/scale-out.md)."""
    if not ids:
        return {}
    db = session.connection()
    if db.dialect.name != "postgresql":
        rows = db.execute(select(QUEUE.c.id, QUEUE.c.gradient).where(QUEUE.c.id.in_(ids))).all()
        return {row.id: bytes(row.gradient) for row in rows}
    raw = db.connection.dbapi_connection
    with raw.cursor(binary=True) as cursor:  # type: ignore[union-attr]
        cursor.execute("SELECT id, gradient FROM push_queue WHERE id = ANY(%s)", [ids])
        return {int(i): bytes(g) for i, g in cursor.fetchall()}


def queue_length(session: Session) -> int:
    return int(session.execute(select(func.count()).select_from(QUEUE)).scalar_one())
