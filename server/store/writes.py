"""Domain events to table rows: the write half of the SQL store (server/store/sql.py).

A batch from the journal arrives as grants, other events, answers and a state checkpoint; runs of
grants and answers become bulk statements (one executemany each), so a batch of pushes costs a handful
of statements and one commit.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict

from sqlalchemy import Connection, bindparam, delete, insert, update
from sqlalchemy.orm import Session

from server.core.events import (
    CounterBumped,
    DeviceEnrolled,
    DeviceReenrolled,
    DeviceRevoked,
    EnrollmentKeyCreated,
    EnrollmentKeyRevoked,
    EvaluationRecorded,
    Event,
    Fenced,
    HeadPromoted,
    LeasesExpired,
    ModelAdded,
    PushApplied,
    PushDropped,
    PushQueued,
    PushRefused,
    StateCheckpoint,
    StatusChanged,
    StopCriterionSet,
    TaskGranted,
    VersionNoted,
)
from server.store import lineage, queue, state_rows
from server.store import repository as repo
from server.store.tables import DeviceRow, MeasurementRow, ModelRow, PrivacyChargeRow, TaskRow, VersionRow

# Every batch runs these statements: built once, because SQLAlchemy derives a statement's cache key on each
# execution of a new construct (tens of µs each), and reuses it for the same object.
_TASKS, _DEVICES = TaskRow.__table__, DeviceRow.__table__
_VERSIONS, _MODELS = VersionRow.__table__, ModelRow.__table__
INSERT_TASKS = insert(_TASKS)
INSERT_CHARGES = insert(PrivacyChargeRow.__table__)
SET_EXAMPLES = (
    update(_DEVICES).where(_DEVICES.c.id == bindparam("device")).values(local_examples=bindparam("examples"))
)
SET_SEEN = (
    update(_DEVICES)
    .where(_DEVICES.c.id == bindparam("device_id"))
    .values(last_seen=bindparam("seen"), last_features=bindparam("features"))
)
SET_ANSWERED = update(_TASKS).where(_TASKS.c.id == bindparam("task_id"))
INSERT_MEASUREMENTS = insert(MeasurementRow.__table__)
COUNT_APPLIED = (
    update(_DEVICES)
    .where(_DEVICES.c.id == bindparam("device_id"))
    .values(tasks_applied=_DEVICES.c.tasks_applied + bindparam("n"))
)
INSERT_VERSIONS = insert(_VERSIONS)
MOVE_HEAD = (
    update(_MODELS)
    .where(_MODELS.c.id == bindparam("model_id"), _MODELS.c.current_version < bindparam("newest"))
    .values(current_version=bindparam("newest"))
)
DROP_OLD_VERSIONS = delete(_VERSIONS).where(
    _VERSIONS.c.model_id == bindparam("model_id"),
    _VERSIONS.c.version > 0,
    _VERSIONS.c.version <= bindparam("oldest_dropped"),
)


def write_events(session: Session, events: Sequence[Event], *, retention: int) -> None:
    """``events`` in order; consecutive grants and consecutive answers become one bulk statement each."""
    i = 0
    while i < len(events):
        kind = type(events[i])
        j = i + 1
        if kind in (TaskGranted, PushApplied, HeadPromoted):
            session.flush()  # rows added through the ORM before (a device, a counter) exist for the SQL below
        if kind in (TaskGranted, PushApplied, PushQueued):
            while j < len(events) and type(events[j]) is kind:
                j += 1
            run = events[i:j]
            if kind is TaskGranted:
                _write_grants(session, run)  # type: ignore[arg-type]
            elif kind is PushQueued:
                queue.write_queued(session, run)  # type: ignore[arg-type]
            else:
                _write_answers(session, run, retention=retention)  # type: ignore[arg-type]
        elif kind is HeadPromoted:
            _promote(session, events[i], retention=retention)  # type: ignore[arg-type]
        else:
            _write_one(session, events[i])
        i = j


def _write_grants(session: Session, grants: Sequence[TaskGranted]) -> None:
    rows = [
        {
            "id": g.task_id,
            "model_id": g.model_id,
            "device_id": g.device_id,
            "device_model": g.device_model,
            "version": g.version,
            "batch_size": g.batch_size,
            "similarity": g.similarity,
            "features": g.features,
            "predicted_time_ms": g.predicted_time_ms,
            "predicted_energy": g.predicted_energy,
            "created_at": g.created_at,
            "deadline": g.deadline,
            "status": "open",
        }
        for g in grants
    ]
    db = session.connection()
    db.execute(INSERT_TASKS, rows)
    charges = [asdict(g.privacy) for g in grants if g.privacy is not None]
    if charges:
        db.execute(INSERT_CHARGES, charges)
        examples = [{"device": c["device_id"], "examples": c["local_examples"]} for c in charges]
        db.execute(SET_EXAMPLES, examples)
    # each device's latest request wins; rows are locked in id order, as _write_answers does, so that
    # concurrent writers (scale-out: API workers and the aggregator) cannot deadlock on them
    latest = {g.device_id: g for g in grants}
    seen = [{"device_id": d, "seen": g.created_at, "features": g.features} for d, g in sorted(latest.items())]
    db.execute(SET_SEEN, seen)


def _write_answers(session: Session, answers: Sequence[PushApplied], *, retention: int) -> None:
    """Core statements on the connection: no ORM bookkeeping per row."""
    db = session.connection()
    if db.dialect.name == "postgresql":
        _answers_postgres(db, answers)
    else:
        _answers_rows(db, answers)
    queue.delete_applied(db, [a.queue_id for a in answers if a.queue_id is not None])
    applied = Counter(a.device_id for a in answers)
    db.execute(COUNT_APPLIED, [{"device_id": d, "n": n} for d, n in sorted(applied.items())])
    versions = [(a.new_version, a.at) for a in answers if a.new_version is not None]
    if not versions:
        return
    db.execute(
        INSERT_VERSIONS,
        [
            {"model_id": v.model_id, "version": v.version, "params": v.params, "created_at": at}
            for v, at in versions
        ],
    )
    _new_head(db, versions[-1][0].model_id, versions[-1][0].version, retention=retention)


def _answers_rows(db: Connection, answers: Sequence[PushApplied]) -> None:
    """The tasks' answers and the measurements, one executemany each (SQLite)."""
    db.execute(
        SET_ANSWERED,
        [
            {
                "task_id": a.task_id,
                "status": "applied",
                "digest": a.digest,
                "outcome": a.outcome,
                "staleness": a.staleness,
                "weight": a.weight,
                "answered_at": a.at,
            }
            for a in answers
        ],
    )
    db.execute(
        INSERT_MEASUREMENTS,
        [
            {
                "task_id": a.task_id,
                "device_model": a.device_model,
                "batch_size": a.batch_size,
                "compute_time_ms": a.compute_time_ms,
                "predicted_time_ms": a.predicted_time_ms,
                "energy": a.energy,
                "predicted_energy": a.predicted_energy,
                "loss": a.loss,
                "at": a.at,
            }
            for a in answers
        ],
    )


# On PostgreSQL a batch's answers are one statement each over arrays (unnest): the aggregator writes
# hundreds per transaction, and one UPDATE per row cost more than applying the gradients.
ANSWERS_SQL = """
UPDATE tasks SET status = 'applied', digest = v.digest, outcome = v.outcome::json, staleness = v.staleness,
       weight = v.weight, answered_at = v.at
FROM unnest(%(ids)s::varchar[], %(digests)s::varchar[], %(outcomes)s::text[], %(staleness)s::int[],
            %(weights)s::float8[], %(at)s::float8[]) AS v(id, digest, outcome, staleness, weight, at)
WHERE tasks.id = v.id
"""
MEASUREMENTS_SQL = """
INSERT INTO measurements (task_id, device_model, batch_size, compute_time_ms, predicted_time_ms, energy,
                          predicted_energy, loss, at)
SELECT * FROM unnest(%(ids)s::varchar[], %(models)s::varchar[], %(batch)s::int[], %(time)s::float8[],
                     %(predicted_time)s::float8[], %(energy)s::float8[], %(predicted_energy)s::float8[],
                     %(loss)s::float8[], %(at)s::float8[])
"""


def _answers_postgres(db: Connection, answers: Sequence[PushApplied]) -> None:
    ids = [a.task_id for a in answers]
    at = [a.at for a in answers]
    cursor = db.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    # binary parameters: psycopg quotes text arrays element by element with a regex otherwise
    cursor.execute(
        ANSWERS_SQL,
        {
            "ids": ids,
            "digests": [a.digest for a in answers],
            "outcomes": [json.dumps(a.outcome) for a in answers],
            "staleness": [a.staleness for a in answers],
            "weights": [a.weight for a in answers],
            "at": at,
        },
        binary=True,
    )
    cursor.execute(
        MEASUREMENTS_SQL,
        {
            "ids": ids,
            "models": [a.device_model for a in answers],
            "batch": [a.batch_size for a in answers],
            "time": [a.compute_time_ms for a in answers],
            "predicted_time": [a.predicted_time_ms for a in answers],
            "energy": [a.energy for a in answers],
            "predicted_energy": [a.predicted_energy for a in answers],
            "loss": [a.loss for a in answers],
            "at": at,
        },
        binary=True,
    )
    cursor.close()


def _new_head(db: Connection, model_id: str, newest: int, *, retention: int) -> None:
    """Move the model's current version up to ``newest`` (never down: pushes on the head a promotion
    replaced may be written after it, in the same batch) and drop versions past retention."""
    db.execute(MOVE_HEAD, {"model_id": model_id, "newest": newest})
    db.execute(DROP_OLD_VERSIONS, {"model_id": model_id, "oldest_dropped": newest - retention})


def _promote(session: Session, event: HeadPromoted, *, retention: int) -> None:
    """The promoted parameters as a new version, which becomes the head of the one active model."""
    db = session.connection()
    version = {"model_id": event.model_id, "version": event.version, "params": event.params}
    lineage = {"origin": event.kind, "source_version": event.source_version, "note": event.note}
    db.execute(INSERT_VERSIONS, {**version, **lineage, "created_at": event.at})
    _new_head(db, event.model_id, event.version, retention=retention)
    repo.activate_model(session=session, model_id=event.model_id)
    repo.set_model_fields(session=session, model_id=event.model_id, status="training")
    repo.add_promotion(  # the console audits it
        session=session,
        model_id=event.model_id,
        version=event.version,
        source_version=event.source_version,
        previous_model_id=event.previous_model_id,
        previous_version=event.previous_version,
        actor=event.actor[:64],
        at=event.at,
        kind=event.kind,
    )


def _write_one(session: Session, event: Event) -> None:
    match event:
        case StatusChanged():
            repo.set_model_fields(session=session, model_id=event.model_id, status=event.status)
            detail = {
                "model_id": event.model_id,
                "version": event.version,
                "old": event.previous,
                "new": event.status,
            }
            repo.audit(
                session=session,
                actor=event.actor,
                action=f"status:{event.status}",
                detail=detail,
                now=event.at,
            )
        case StopCriterionSet():
            repo.set_model_fields(
                session=session,
                model_id=event.model_id,
                stop_accuracy=event.target_accuracy,
                stop_versions=event.max_versions,
            )
            detail = {"target_accuracy": event.target_accuracy, "max_versions": event.max_versions}
            repo.audit(
                session=session, actor=event.actor, action="stop_criterion", detail=detail, now=event.at
            )
        case EvaluationRecorded():
            repo.add_evaluation(
                session=session,
                model_id=event.model_id,
                version=event.version,
                accuracy=event.accuracy,
                loss=event.loss,
                now=event.at,
                reference=event.reference,
                served=event.served,
            )
        case VersionNoted():
            lineage.write_note(session, event)
        case LeasesExpired():
            repo.expire_tasks(session=session, now=event.before)
        case CounterBumped():
            repo.bump_counter(session=session, name=event.name, by=event.by)
        case ModelAdded():
            repo.add_model(session=session, event=event)
            repo.audit(
                session=session,
                actor=event.actor,
                action="add_model",
                detail={"model_id": event.model_id},
                now=event.at,
            )
        case DeviceEnrolled():
            repo.add_device(
                session=session,
                device_id=event.device_id,
                device_model=event.device_model,
                token_hash=event.token_hash,
                now=event.at,
                install_hash=event.install_hash,
                enrollment_key_id=event.enrollment_key_id,
            )
        case PushDropped() | PushRefused() | Fenced():
            _write_push(session, event)
        case StateCheckpoint():
            if event.model_id is not None and event.strategy is not None:
                state_rows.save_strategy_state(
                    session=session, model_id=event.model_id, state=event.strategy, now=event.at
                )
            state_rows.save_profiler_states(session=session, states=event.profiles, now=event.at)
        case _:
            _write_access(session, event)


def _write_push(session: Session, event: PushDropped | PushRefused | Fenced) -> None:
    """What happened to a push besides its answer: dropped by the aggregator, refused (a DP task keeps
    the refused body's digest), or the aggregator's fence."""
    match event:
        case PushDropped():
            queue.write_dropped(session, event)
        case PushRefused():
            repo.refuse_push(session=session, task_id=event.task_id, digest=event.digest)
        case Fenced():
            queue.check_fence(session, event)


def _write_access(session: Session, event: Event) -> None:
    """Who may use the coordinator: device revocations, re-enrollments and enrollment keys."""
    match event:
        case DeviceReenrolled():
            repo.replace_device_token(session=session, device_id=event.device_id, token_hash=event.token_hash)
        case DeviceRevoked():
            repo.revoke_device(session=session, device_id=event.device_id, now=event.at)
        case EnrollmentKeyCreated():
            repo.add_enrollment_key(
                session=session,
                key_id=event.key_id,
                name=event.name,
                key_hash=event.key_hash,
                actor=event.actor,
                now=event.at,
                max_devices=event.max_devices,
                expires_at=event.expires_at,
            )
        case EnrollmentKeyRevoked():
            repo.revoke_enrollment_key(session=session, key_id=event.key_id, now=event.at)
        case _:
            raise TypeError(f"no storage for event {type(event).__name__}")
