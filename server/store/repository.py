"""Data functions: keyword-only, take a session, return rows or plain values; no HTTP, no engines."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Float, case, func, insert, select, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from server.core.events import ModelAdded
from server.store.tables import (
    AuditRow,
    CounterRow,
    DeviceRow,
    EnrollmentKeyRow,
    EvaluationRow,
    MeasurementRow,
    ModelRow,
    PromotionRow,
    TaskRow,
    VersionRow,
)


# -- devices ---------------------------------------------------------------------------------------
def add_device(
    *,
    session: Session,
    device_id: str,
    device_model: str,
    token_hash: str,
    now: float,
    install_hash: str | None,
    enrollment_key_id: str | None = None,
) -> None:
    session.add(
        DeviceRow(
            id=device_id,
            device_model=device_model,
            token_hash=token_hash,
            created_at=now,
            last_seen=now,
            install_hash=install_hash,
            enrollment_key_id=enrollment_key_id,
        )
    )


def replace_device_token(*, session: Session, device_id: str, token_hash: str) -> None:
    """The device's one token becomes ``token_hash``: the old token stops authenticating."""
    session.execute(update(DeviceRow).where(DeviceRow.id == device_id).values(token_hash=token_hash))


def device_by_install(*, session: Session, install_hash: str) -> DeviceRow | None:
    """The device an install enrolled as (revoked or not)."""
    return session.scalar(select(DeviceRow).where(DeviceRow.install_hash == install_hash))


def device_by_token(*, session: Session, token_hash: str) -> DeviceRow | None:
    """The device of a token; a revoked device has none."""
    return session.scalar(
        select(DeviceRow).where(DeviceRow.token_hash == token_hash, DeviceRow.revoked_at.is_(None))
    )


def get_device(*, session: Session, device_id: str) -> DeviceRow | None:
    return session.get(DeviceRow, device_id)


def count_devices(*, session: Session, enrollment_key_id: str | None = None) -> int:
    query = select(func.count()).select_from(DeviceRow)
    if enrollment_key_id is not None:
        query = query.where(DeviceRow.enrollment_key_id == enrollment_key_id)
    return int(session.scalar(query) or 0)


def devices_per_key(*, session: Session) -> dict[str, int]:
    """Devices per enrollment key (one grouped count over the indexed column)."""
    query = (
        select(DeviceRow.enrollment_key_id, func.count())
        .where(DeviceRow.enrollment_key_id.is_not(None))
        .group_by(DeviceRow.enrollment_key_id)
    )
    return {str(key): int(n) for key, n in session.execute(query)}


def revoke_device(*, session: Session, device_id: str, now: float) -> None:
    """Set revoked_at once (revoking again keeps the first time)."""
    unrevoked = (DeviceRow.id == device_id) & DeviceRow.revoked_at.is_(None)
    session.execute(update(DeviceRow).where(unrevoked).values(revoked_at=now))


def list_devices(
    *,
    session: Session,
    offset: int,
    limit: int,
    device_model: str | None,
    enrollment_key_id: str | None = None,
) -> list[DeviceRow]:
    """A page of devices, the most recently seen first (id breaks ties, so pages do not overlap)."""
    query = select(DeviceRow).order_by(DeviceRow.last_seen.desc(), DeviceRow.id).offset(offset).limit(limit)
    if device_model is not None:
        query = query.where(DeviceRow.device_model == device_model)
    if enrollment_key_id is not None:
        query = query.where(DeviceRow.enrollment_key_id == enrollment_key_id)
    return list(session.scalars(query))


def device_model_counts(
    *, session: Session, now: float, active_within_s: float
) -> dict[str, tuple[int, int, float]]:
    """Per device model: (devices, non-revoked devices seen since now - active_within_s, latest seen)."""
    active = case(
        (DeviceRow.revoked_at.is_(None) & (DeviceRow.last_seen >= now - active_within_s), 1), else_=0
    )
    seen = func.max(DeviceRow.last_seen)
    rows = session.execute(
        select(DeviceRow.device_model, func.count(), func.sum(active), seen).group_by(DeviceRow.device_model)
    )
    return {str(dm): (int(n), int(a or 0), float(seen)) for dm, n, a, seen in rows}


# -- enrollment keys -------------------------------------------------------------------------------
def add_enrollment_key(
    *,
    session: Session,
    key_id: str,
    name: str,
    key_hash: str,
    actor: str,
    now: float,
    max_devices: int | None = None,
    expires_at: float | None = None,
) -> None:
    session.execute(
        insert(EnrollmentKeyRow).values(
            id=key_id,
            name=name[:120],
            key_hash=key_hash,
            created_at=now,
            created_by=actor[:64],
            revoked_at=None,
            max_devices=max_devices,
            expires_at=expires_at,
        )
    )


def revoke_enrollment_key(*, session: Session, key_id: str, now: float) -> None:
    session.execute(
        update(EnrollmentKeyRow)
        .where(EnrollmentKeyRow.id == key_id, EnrollmentKeyRow.revoked_at.is_(None))
        .values(revoked_at=now)
    )


def enrollment_keys(*, session: Session) -> list[EnrollmentKeyRow]:
    return list(session.scalars(select(EnrollmentKeyRow).order_by(EnrollmentKeyRow.created_at)))


def enrollment_key_by_hash(*, session: Session, key_hash: str) -> EnrollmentKeyRow | None:
    return session.scalar(select(EnrollmentKeyRow).where(EnrollmentKeyRow.key_hash == key_hash))


# -- models and versions ---------------------------------------------------------------------------
def add_model(*, session: Session, event: ModelAdded) -> None:
    """The new model becomes the only active one, with version 0 = its initial parameters."""
    session.execute(update(ModelRow).values(active=False))
    session.add(
        ModelRow(
            id=event.model_id,
            name=event.name,
            manifest=event.manifest_json,
            train_onnx=event.train_onnx,
            infer_onnx=event.infer_onnx,
            dp_onnx=event.dp_onnx,
            created_at=event.at,
            active=True,
            current_version=0,
            status="training",
        )
    )
    session.flush()
    session.add(VersionRow(model_id=event.model_id, version=0, params=event.init_params, created_at=event.at))


def get_graph(*, session: Session, model_id: str, which: str) -> bytes | None:
    """The model's ``train``, ``infer`` or ``dp`` ONNX graph (None for an unknown model, or no DP graph)."""
    column = {"train": ModelRow.train_onnx, "infer": ModelRow.infer_onnx, "dp": ModelRow.dp_onnx}[which]
    return session.scalar(select(column).where(ModelRow.id == model_id))


def active_model(*, session: Session) -> ModelRow | None:
    return session.scalar(select(ModelRow).where(ModelRow.active.is_(True)))


def get_model(*, session: Session, model_id: str) -> ModelRow | None:
    return session.get(ModelRow, model_id)


def list_models(*, session: Session) -> list[ModelRow]:
    return list(session.scalars(select(ModelRow).order_by(ModelRow.created_at)))


def get_version(*, session: Session, model_id: str, version: int) -> bytes | None:
    row = session.get(VersionRow, (model_id, version))
    return None if row is None else row.params


def get_served(*, session: Session, model_id: str, version: int) -> bytes | None:
    where = (VersionRow.model_id == model_id, VersionRow.version == version)
    return session.scalar(select(VersionRow.served).where(*where))


def set_model_fields(*, session: Session, model_id: str, **fields: Any) -> None:
    session.execute(update(ModelRow).where(ModelRow.id == model_id).values(**fields))


def activate_model(*, session: Session, model_id: str) -> None:
    """``model_id`` becomes the only active model."""
    session.execute(update(ModelRow).values(active=ModelRow.id == model_id))


def add_promotion(*, session: Session, **fields: Any) -> None:
    session.execute(insert(PromotionRow).values(**fields))


def last_promotion(*, session: Session) -> PromotionRow | None:
    return session.scalar(select(PromotionRow).order_by(PromotionRow.id.desc()).limit(1))


# -- tasks -----------------------------------------------------------------------------------------
def get_task(*, session: Session, task_id: str) -> TaskRow | None:
    return session.get(TaskRow, task_id)


def expire_tasks(*, session: Session, now: float) -> int:
    result = session.execute(
        update(TaskRow).where(TaskRow.status == "open", TaskRow.deadline < now).values(status="expired")
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def refuse_push(*, session: Session, task_id: str, digest: str) -> None:
    """Keep a refused DP push's digest on its still-open task (a different body is then refused too)."""
    session.execute(
        update(TaskRow).where(TaskRow.id == task_id, TaskRow.status == "open").values(digest=digest)
    )


def recent_tasks(*, session: Session, model_id: str, limit: int) -> list[TaskRow]:
    return list(
        session.scalars(
            select(TaskRow)
            .where(TaskRow.model_id == model_id, TaskRow.status == "applied")
            .order_by(TaskRow.answered_at.desc())
            .limit(limit)
        )
    )


class minute_start(FunctionElement[float]):  # noqa: N801 - used like a SQL function
    """The start of the minute of a (non-negative) UNIX time, in SQL: floor(t / 60) * 60."""

    type = Float()
    inherit_cache = True


@compiles(minute_start)
def _minute_start(element: minute_start, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(floor({compiler.process(element.clauses, **kw)} / 60.0) * 60)"


@compiles(minute_start, "sqlite")
def _minute_start_sqlite(element: minute_start, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite has floor() only when built with its math functions; CAST truncates, = floor for t >= 0
    return f"(CAST({compiler.process(element.clauses, **kw)} / 60.0 AS INTEGER) * 60)"


def task_counts(*, session: Session, model_id: str) -> dict[str, int]:
    rows = session.execute(
        select(TaskRow.status, func.count()).where(TaskRow.model_id == model_id).group_by(TaskRow.status)
    )
    return {str(status): int(n) for status, n in rows}


def answers_per_minute(*, session: Session, model_id: str, since: float) -> list[tuple[float, int]]:
    """Answered tasks per minute since ``since`` (index ix_tasks_model_id_answered_at), oldest first."""
    minute: ColumnElement[float] = minute_start(TaskRow.answered_at).label("minute")
    rows = session.execute(
        select(minute, func.count())
        .where(TaskRow.model_id == model_id, TaskRow.answered_at >= since)
        .group_by(minute)
        .order_by(minute)
    )
    return [(float(m), int(n)) for m, n in rows]


# -- measurements, evaluations, counters, audit ----------------------------------------------------
def device_measurements(*, session: Session, device_model: str, limit: int) -> list[MeasurementRow]:
    """The latest measurements of one device model, oldest first (predicted vs measured, for charts)."""
    rows = session.scalars(
        select(MeasurementRow)
        .where(MeasurementRow.device_model == device_model)
        .order_by(MeasurementRow.id.desc())
        .limit(limit)
    )
    return list(rows)[::-1]


def measurement_counts(*, session: Session) -> dict[str, tuple[int, float]]:
    """Per device model: (number of measurements, time of the latest)."""
    rows = session.execute(
        select(MeasurementRow.device_model, func.count(), func.max(MeasurementRow.at)).group_by(
            MeasurementRow.device_model
        )
    )
    return {str(dm): (int(n), float(at)) for dm, n, at in rows}


def add_evaluation(
    *,
    session: Session,
    model_id: str,
    version: int,
    accuracy: float,
    loss: float,
    now: float,
    reference: float | None = None,
    served: bytes | None = None,
) -> None:
    """``served``: the parameters scored when they were not the version's own, kept with the version."""
    fields = {"accuracy": accuracy, "loss": loss, "reference": reference}
    session.add(EvaluationRow(model_id=model_id, version=version, at=now, **fields))
    if served is not None:  # a no-op once the version is past retention
        where = (VersionRow.model_id == model_id, VersionRow.version == version)
        session.execute(update(VersionRow).where(*where).values(served=served))


def latest_evaluation(*, session: Session, model_id: str) -> EvaluationRow | None:
    return session.scalar(
        select(EvaluationRow)
        .where(EvaluationRow.model_id == model_id)
        .order_by(EvaluationRow.id.desc())
        .limit(1)
    )


def evaluations(*, session: Session, model_id: str) -> list[EvaluationRow]:
    return list(
        session.scalars(
            select(EvaluationRow).where(EvaluationRow.model_id == model_id).order_by(EvaluationRow.id)
        )
    )


def bump_counter(*, session: Session, name: str, by: int = 1) -> None:
    row = session.get(CounterRow, name)
    if row is None:
        session.add(CounterRow(name=name, value=by))
    else:
        row.value += by


def counters(*, session: Session, prefix: str = "") -> dict[str, int]:
    rows = session.scalars(select(CounterRow).where(CounterRow.name.startswith(prefix)))
    return {r.name.removeprefix(prefix): r.value for r in rows}


def audit(*, session: Session, actor: str, action: str, detail: dict[str, Any], now: float) -> None:
    session.add(AuditRow(at=now, actor=actor, action=action, detail=detail))
