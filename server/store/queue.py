"""The scale-out queue's SQL (docs/scale-out.md): API workers insert validated pushes, the aggregator
reads them oldest first and deletes each in the transaction that applies it; its lease fences it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql
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


# a retry that reached another worker queues nothing twice (the topology runs on PostgreSQL only)
INSERT_IGNORING_DUPLICATES = postgresql.insert(QUEUE).on_conflict_do_nothing(index_elements=["task_id"])


def write_queued(session: Session, pushes: Sequence[PushQueued]) -> None:
    db = session.connection()
    db.execute(
        INSERT_IGNORING_DUPLICATES,
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
    # a paused holder may sit on the row's lock: give up quickly (the caller asks again) rather than wait
    db.exec_driver_sql("SET LOCAL lock_timeout = '500ms'")
    row = db.execute(select(LEASE).where(LEASE.c.id == 1).with_for_update()).first()
    if row is None:
        db.execute(insert(LEASE).values(id=1, holder=holder, token=1, expires_at=now + ttl))
        return 1
    if row.expires_at >= now and row.holder != holder:
        return None
    token = int(row.token) + 1
    db.execute(update(LEASE).where(LEASE.c.id == 1).values(holder=holder, token=token, expires_at=now + ttl))
    return token


QUEUED_SQL = """
SELECT q.id, q.task_id, q.digest, q.meta, q.gradient, t.model_id, t.device_id, t.device_model, t.version,
       t.batch_size, t.features, t.deadline, t.predicted_time_ms, t.predicted_energy
FROM (SELECT * FROM push_queue WHERE id > %(after)s ORDER BY id LIMIT %(limit)s) AS q
JOIN tasks AS t ON t.id = q.task_id
ORDER BY q.id
"""


def queued(session: Session, *, limit: int, after: int = 0) -> list[QueuedPush]:
    """The oldest queued pushes (with an id above ``after``) with their leases, in queue order.

    The queue's rows are picked first and joined to their tasks by key, so the read does not grow with
    the tasks table. The rows come in binary format (the topology runs on PostgreSQL): psycopg reads
    bytea as hex text otherwise (twice the bytes, and decoding it was most of the read time)."""
    db = session.connection()
    with db.connection.dbapi_connection.cursor(binary=True) as cursor:  # type: ignore[union-attr]
        cursor.execute(QUEUED_SQL, {"after": after, "limit": limit})
        rows = cursor.fetchall()
    return [_queued(*row) for row in rows]


def _queued(
    queue_id: int, task_id: str, digest: str, meta: Any, gradient: bytes, model_id: str, device_id: str,
    device_model: str, version: int, batch_size: int, features: Any, deadline: float,
    predicted_time_ms: float | None, predicted_energy: float | None,
) -> QueuedPush:  # fmt: skip
    lease = Lease(
        task_id, model_id, device_id, device_model, version, batch_size, _json(features),
        predicted_time_ms, predicted_energy, deadline,
    )  # fmt: skip
    return QueuedPush(int(queue_id), lease, digest, _json(meta), bytes(gradient))


def _json(value: Any) -> dict[str, Any]:
    """A JSON column as a dict (psycopg parses json columns; raw text only if it did not)."""
    return dict(json.loads(value)) if isinstance(value, str | bytes) else dict(value)


def queue_length(session: Session) -> int:
    return int(session.execute(select(func.count()).select_from(QUEUE)).scalar_one())
