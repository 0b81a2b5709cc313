"""The SQL implementation of the core's ``Store`` port: domain events in, plain records out.

Reads return plain records (ports.py), never ORM rows; writes go through ``write_events``
(server/store/writes.py), the only place that turns the core's events into table rows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import exc, select, text
from sqlalchemy.orm import Session, sessionmaker

from server.core.errors import StorageUnavailable
from server.core.events import (
    Event,
    PrivacyCharged,
)
from server.core.ports import (
    AnsweredTask,
    DeviceRecord,
    EnrollmentKey,
    EvaluationRecord,
    Lease,
    MeasurementRecord,
    ModelRecord,
    PromotionRecord,
    VersionRecord,
)
from server.core.types import Device
from server.store import lineage, queue, state_rows
from server.store import repository as repo
from server.store.tables import DeviceRow, EnrollmentKeyRow, ModelRow, PrivacyChargeRow
from server.store.writes import write_events

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

    # -- scale-out: the push queue and the aggregator's lease (server/store/queue.py) --------------
    def queued(self, limit: int, *, after: int = 0) -> list[queue.QueuedPush]:
        with self.sessions() as session:
            return queue.queued(session, limit=limit, after=after)

    def queue_length(self) -> int:
        with self.sessions() as session:
            return queue.queue_length(session)

    def active_head(self) -> tuple[str, int, str] | None:
        """(model id, current version, status) of the active model: what an API worker polls, without
        the model's graphs (reading the whole row on every announcement cost more than the pushes)."""
        with self.sessions() as session:
            row = session.execute(
                select(ModelRow.id, ModelRow.current_version, ModelRow.status).where(
                    ModelRow.active.is_(True)
                )
            ).first()
        return None if row is None else (str(row.id), int(row.current_version), str(row.status))

    def take_aggregator_lease(self, holder: str, *, now: float, ttl: float) -> int | None:
        with self.sessions.begin() as session:
            return queue.take_lease(session, holder=holder, now=now, ttl=ttl)

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

    def served_params(self, model_id: str, version: int) -> bytes | None:
        with self.sessions() as session:
            return repo.get_served(session=session, model_id=model_id, version=version)

    def versions(self, model_id: str) -> list[VersionRecord]:
        with self.sessions() as session:
            return lineage.list_versions(session, model_id)

    # -- devices and tasks -----------------------------------------------------------------------
    def privacy_charges(self) -> list[PrivacyCharged]:
        with self.sessions() as session:
            rows = session.scalars(select(PrivacyChargeRow).order_by(PrivacyChargeRow.id))
            return [
                PrivacyCharged(
                    device_id=r.device_id,
                    task_id=r.task_id,
                    model_id=r.model_id,
                    at=r.at,
                    noise_multiplier=r.noise_multiplier,
                    sampling_rate=r.sampling_rate,
                    local_examples=r.local_examples,
                    mechanism=r.mechanism,
                    epsilon=r.epsilon,
                    norm_bound=r.norm_bound,
                    norm_floor=r.norm_floor,
                )
                for r in rows
            ]

    def device_by_token(self, token_hash: str) -> Device | None:
        with self.sessions() as session:
            row = repo.device_by_token(session=session, token_hash=token_hash)
            return None if row is None else Device(device_id=row.id, device_model=row.device_model)

    def device(self, device_id: str) -> DeviceRecord | None:
        with self.sessions() as session:
            row = repo.get_device(session=session, device_id=device_id)
            return None if row is None else _device(row)

    def device_by_install(self, install_hash: str) -> DeviceRecord | None:
        with self.sessions() as session:
            row = repo.device_by_install(session=session, install_hash=install_hash)
            return None if row is None else _device(row)

    def count_devices(self, *, enrollment_key_id: str | None = None) -> int:
        with self.sessions() as session:
            return repo.count_devices(session=session, enrollment_key_id=enrollment_key_id)

    def devices_per_key(self) -> dict[str, int]:
        with self.sessions() as session:
            return repo.devices_per_key(session=session)

    def enrollment_keys(self) -> list[EnrollmentKey]:
        with self.sessions() as session:
            return [_key(r) for r in repo.enrollment_keys(session=session)]

    def enrollment_key_by_hash(self, key_hash: str) -> EnrollmentKey | None:
        with self.sessions() as session:
            row = repo.enrollment_key_by_hash(session=session, key_hash=key_hash)
            return None if row is None else _key(row)

    def last_promotion(self) -> PromotionRecord | None:
        with self.sessions() as session:
            row = repo.last_promotion(session=session)
            return None if row is None else lineage.promotion_record(row)

    def head_changes(self) -> list[PromotionRecord]:
        with self.sessions() as session:
            return lineage.head_changes(session)

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
            return state_rows.load_strategy_state(session=session, model_id=model_id)

    def profiler_states(self) -> dict[str, dict[str, Any]]:
        with self.sessions() as session:
            return state_rows.load_profiler_states(session=session)

    def counters(self, prefix: str) -> dict[str, int]:
        with self.sessions() as session:
            return repo.counters(session=session, prefix=prefix)

    # -- figures ---------------------------------------------------------------------------------
    def evaluations(self, model_id: str) -> list[EvaluationRecord]:
        with self.sessions() as session:
            rows = repo.evaluations(session=session, model_id=model_id)
        return [EvaluationRecord(r.version, r.accuracy, r.loss, r.at, r.reference) for r in rows]

    def latest_evaluation(self, model_id: str) -> EvaluationRecord | None:
        with self.sessions() as session:
            r = repo.latest_evaluation(session=session, model_id=model_id)
        return None if r is None else EvaluationRecord(r.version, r.accuracy, r.loss, r.at, r.reference)

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

    # -- the console's pages ---------------------------------------------------------------------
    def devices(
        self,
        *,
        offset: int = 0,
        limit: int = 100,
        device_model: str | None = None,
        enrollment_key_id: str | None = None,
    ) -> list[DeviceRecord]:
        with self.sessions() as session:
            rows = repo.list_devices(
                session=session,
                offset=offset,
                limit=limit,
                device_model=device_model,
                enrollment_key_id=enrollment_key_id,
            )
            return [_device(r) for r in rows]

    def device_model_counts(
        self, now: float, active_within_s: float = 300.0
    ) -> dict[str, tuple[int, int, float]]:
        with self.sessions() as session:
            return repo.device_model_counts(session=session, now=now, active_within_s=active_within_s)

    def task_counts(self, model_id: str) -> dict[str, int]:
        with self.sessions() as session:
            return repo.task_counts(session=session, model_id=model_id)

    def answers_per_minute(self, model_id: str, since: float) -> list[tuple[float, int]]:
        with self.sessions() as session:
            return repo.answers_per_minute(session=session, model_id=model_id, since=since)


def _device(row: DeviceRow) -> DeviceRecord:
    return DeviceRecord(
        device_id=row.id,
        device_model=row.device_model,
        created_at=row.created_at,
        last_seen=row.last_seen,
        tasks_applied=row.tasks_applied,
        last_features=row.last_features,
        revoked_at=row.revoked_at,
        enrollment_key_id=row.enrollment_key_id,
    )


def _key(row: EnrollmentKeyRow) -> EnrollmentKey:
    return EnrollmentKey(
        key_id=row.id,
        name=row.name,
        created_at=row.created_at,
        created_by=row.created_by,
        revoked_at=row.revoked_at,
        max_devices=row.max_devices,
        expires_at=row.expires_at,
    )


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
