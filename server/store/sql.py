"""The SQL implementation of the core's ``Store`` port: domain events in, plain records out.

The only place that turns the core's events into table rows. A batch from the journal arrives as
grants, other events, answers and a state checkpoint; runs of grants and answers become bulk
statements (one executemany each) so a batch of pushes costs a handful of statements and one commit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import bindparam, delete, exc, insert, text, update
from sqlalchemy.orm import Session, sessionmaker

from server.core.errors import StorageUnavailable
from server.core.events import (
    CounterBumped,
    DeviceEnrolled,
    EvaluationRecorded,
    Event,
    LeasesExpired,
    ModelAdded,
    PushApplied,
    StateCheckpoint,
    StatusChanged,
    StopCriterionSet,
    TaskGranted,
)
from server.core.ports import (
    AnsweredTask,
    EvaluationRecord,
    Lease,
    MeasurementRecord,
    ModelRecord,
)
from server.core.types import Device
from server.store import repository as repo
from server.store.tables import MeasurementRow, ModelRow, TaskRow, VersionRow

T = TypeVar("T")


def is_unavailable(error: exc.SQLAlchemyError) -> bool:
    """Whether ``error`` means the database cannot be used right now (down, restarting, connections
    dropped, pool exhausted, SQLite locked) rather than a bug or a constraint the request broke."""
    return isinstance(
        error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError | exc.DisconnectionError
    ) or (isinstance(error, exc.DBAPIError) and error.connection_invalidated)


def unavailable_as_503(method: Callable[..., T]) -> Callable[..., T]:
    """Raise the core's ``StorageUnavailable`` for a database that cannot be reached: the API answers 503
    with Retry-After instead of a 500, and the core never sees a SQLAlchemy exception."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except exc.SQLAlchemyError as error:
            if is_unavailable(error):
                raise StorageUnavailable(f"database unavailable: {error.__class__.__name__}") from error
            raise

    return guarded


def _guard_public_methods(cls: type[T]) -> type[T]:
    for name, value in list(vars(cls).items()):
        if callable(value) and not name.startswith("_"):
            setattr(cls, name, unavailable_as_503(value))
    return cls


@_guard_public_methods
class SqlStore:
    """Implements ``server.core.ports.Store`` on SQLAlchemy (SQLite or PostgreSQL)."""

    def __init__(self, sessions: sessionmaker[Session], *, version_retention: int = 200) -> None:
        self.sessions = sessions
        self.version_retention = version_retention

    def __repr__(self) -> str:
        return f"SqlStore({self.sessions.kw.get('bind')!r})"

    # -- writes ----------------------------------------------------------------------------------
    def commit(self, events: Sequence[Event]) -> None:
        with self.sessions.begin() as session:
            write_events(session, events, retention=self.version_retention)

    def ping(self) -> None:
        with self.sessions() as session:
            session.execute(text("SELECT 1"))

    # -- models and versions ---------------------------------------------------------------------
    def active_model(self) -> ModelRecord | None:
        with self.sessions() as session:
            row = repo.active_model(session=session)
            return None if row is None else _model(row)

    def model(self, model_id: str) -> ModelRecord | None:
        with self.sessions() as session:
            row = repo.get_model(session=session, model_id=model_id)
            return None if row is None else _model(row)

    def models(self) -> list[ModelRecord]:
        with self.sessions() as session:
            return [_model(r) for r in repo.list_models(session=session)]

    def graph(self, model_id: str, which: str) -> bytes | None:
        with self.sessions() as session:
            return repo.get_graph(session=session, model_id=model_id, which=which)

    def version_params(self, model_id: str, version: int) -> bytes | None:
        with self.sessions() as session:
            return repo.get_version(session=session, model_id=model_id, version=version)

    def versions(self, model_id: str) -> list[tuple[int, float]]:
        with self.sessions() as session:
            return repo.list_versions(session=session, model_id=model_id)

    # -- devices and tasks -----------------------------------------------------------------------
    def device_by_token(self, token_hash: str) -> Device | None:
        with self.sessions() as session:
            row = repo.device_by_token(session=session, token_hash=token_hash)
            return None if row is None else Device(device_id=row.id, device_model=row.device_model)

    def count_devices(self) -> int:
        with self.sessions() as session:
            return repo.count_devices(session=session)

    def lease(self, task_id: str) -> Lease | None:
        with self.sessions() as session:
            row = repo.get_task(session=session, task_id=task_id)
        if row is None:
            return None
        return Lease(
            task_id=row.id,
            model_id=row.model_id,
            device_id=row.device_id,
            device_model=row.device_model,
            version=row.version,
            batch_size=row.batch_size,
            features=dict(row.features),
            predicted_time_ms=row.predicted_time_ms,
            predicted_energy=row.predicted_energy,
            deadline=row.deadline,
            status=row.status,
            digest=row.digest,
            outcome=row.outcome,
        )

    def answered_tasks(self, model_id: str, limit: int) -> list[AnsweredTask]:
        with self.sessions() as session:
            rows = repo.recent_tasks(session=session, model_id=model_id, limit=limit)
        return [
            AnsweredTask(
                task_id=r.id,
                device_model=r.device_model,
                base_version=r.version,
                outcome=r.outcome or {},
                staleness=r.staleness,
                weight=r.weight,
                similarity=r.similarity,
                batch_size=r.batch_size,
                answered_at=r.answered_at,
            )
            for r in rows
        ]

    # -- state -----------------------------------------------------------------------------------
    def strategy_state(self, model_id: str) -> dict[str, Any] | None:
        with self.sessions() as session:
            return repo.load_strategy_state(session=session, model_id=model_id)

    def profiler_states(self) -> dict[str, dict[str, Any]]:
        with self.sessions() as session:
            return repo.load_profiler_states(session=session)

    def counters(self, prefix: str) -> dict[str, int]:
        with self.sessions() as session:
            return repo.counters(session=session, prefix=prefix)

    # -- figures ---------------------------------------------------------------------------------
    def evaluations(self, model_id: str) -> list[EvaluationRecord]:
        with self.sessions() as session:
            rows = repo.evaluations(session=session, model_id=model_id)
        return [EvaluationRecord(r.version, r.accuracy, r.loss, r.at) for r in rows]

    def latest_evaluation(self, model_id: str) -> EvaluationRecord | None:
        with self.sessions() as session:
            r = repo.latest_evaluation(session=session, model_id=model_id)
        return None if r is None else EvaluationRecord(r.version, r.accuracy, r.loss, r.at)

    def measurements(self, device_model: str, limit: int) -> list[MeasurementRecord]:
        with self.sessions() as session:
            rows = repo.device_measurements(session=session, device_model=device_model, limit=limit)
        return [
            MeasurementRecord(
                task_id=r.task_id,
                device_model=r.device_model,
                batch_size=r.batch_size,
                compute_time_ms=r.compute_time_ms,
                predicted_time_ms=r.predicted_time_ms,
                energy=r.energy,
                predicted_energy=r.predicted_energy,
                at=r.at,
            )
            for r in rows
        ]

    def measurement_counts(self) -> dict[str, tuple[int, float]]:
        with self.sessions() as session:
            return repo.measurement_counts(session=session)


def _model(row: ModelRow) -> ModelRecord:
    return ModelRecord(
        model_id=row.id,
        name=row.name,
        manifest_json=row.manifest,
        created_at=row.created_at,
        active=row.active,
        current_version=row.current_version,
        status=row.status,
        stop_accuracy=row.stop_accuracy,
        stop_versions=row.stop_versions,
    )


def write_events(session: Session, events: Sequence[Event], *, retention: int) -> None:
    """``events`` in order; consecutive grants and consecutive answers become one bulk statement each."""
    i = 0
    while i < len(events):
        kind = type(events[i])
        j = i + 1
        if kind in (TaskGranted, PushApplied):
            while j < len(events) and type(events[j]) is kind:
                j += 1
            run = events[i:j]
            if kind is TaskGranted:
                _write_grants(session, run)  # type: ignore[arg-type]
            else:
                _write_answers(session, run, retention=retention)  # type: ignore[arg-type]
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
    session.connection().execute(insert(TaskRow.__table__), rows)


def _write_answers(session: Session, answers: Sequence[PushApplied], *, retention: int) -> None:
    """Core statements on the connection: no ORM bookkeeping per row."""
    tasks, versions_table, models = TaskRow.__table__, VersionRow.__table__, ModelRow.__table__
    db = session.connection()
    db.execute(
        update(tasks).where(tasks.c.id == bindparam("task_id")),
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
        insert(MeasurementRow.__table__),
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
    versions = [(a.new_version, a.at) for a in answers if a.new_version is not None]
    if not versions:
        return
    db.execute(
        insert(versions_table),
        [
            {"model_id": v.model_id, "version": v.version, "params": v.params, "created_at": at}
            for v, at in versions
        ],
    )
    model_id, newest = versions[-1][0].model_id, versions[-1][0].version
    db.execute(update(models).where(models.c.id == model_id).values(current_version=newest))
    db.execute(
        delete(versions_table).where(
            versions_table.c.model_id == model_id,
            versions_table.c.version > 0,
            versions_table.c.version <= newest - retention,
        )
    )


def _write_one(session: Session, event: Event) -> None:
    match event:
        case StatusChanged():
            repo.set_model_fields(session=session, model_id=event.model_id, status=event.status)
            detail = {"model_id": event.model_id, "version": event.version}
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
            )
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
            )
        case StateCheckpoint():
            if event.model_id is not None and event.strategy is not None:
                repo.save_strategy_state(
                    session=session, model_id=event.model_id, state=event.strategy, now=event.at
                )
            repo.save_profiler_states(session=session, states=event.profiles, now=event.at)
        case _:
            raise TypeError(f"no storage for event {type(event).__name__}")
