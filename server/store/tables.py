"""SQLAlchemy tables: what the coordinator must find again after a restart."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class DeviceRow(Base):
    __tablename__ = "devices"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    device_model: Mapped[str] = mapped_column(String(120))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)  # when it was last granted a task
    tasks_applied: Mapped[int] = mapped_column(Integer, default=0)
    last_features: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    local_examples: Mapped[int | None] = mapped_column(Integer, nullable=True)  # last reported (DP sampling)
    # SHA-256 of the install's secret (issue 27): enrolling again with it keeps the device id
    install_hash: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True, index=True)
    # the enrollment key it enrolled with (issue 30, migration 0010): "bootstrap" or a stored key's id;
    # NULL before 0010 and for in-process enrollments. Counted against that key's quota.
    enrollment_key_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)


class ModelRow(Base):
    __tablename__ = "models"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    manifest: Mapped[str] = mapped_column(Text)
    train_onnx: Mapped[bytes] = mapped_column(LargeBinary)
    infer_onnx: Mapped[bytes] = mapped_column(LargeBinary)
    dp_onnx: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # per-example-clipped sum
    created_at: Mapped[float] = mapped_column(Float)
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    current_version: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default="training")
    stop_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_versions: Mapped[int | None] = mapped_column(Integer, nullable=True)


class VersionRow(Base):
    __tablename__ = "model_versions"
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    params: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)
    # lineage (migration 0009): NULL for a version trained on the one below; "promotion" or "rollback"
    # of ``source_version``'s parameters otherwise (server/core/lineage.py)
    origin: Mapped[str | None] = mapped_column(String(16), nullable=True)
    source_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str | None] = mapped_column(String(500), nullable=True)  # the operator's, plain text
    # 0013: the parameters served at this version when they are not the trained ones (a serving-average
    # strategy's average), kept for an evaluated version so its download scores what was recorded
    served: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)


class TaskRow(Base):
    __tablename__ = "tasks"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    model_id: Mapped[str] = mapped_column(String(64), index=True)
    device_id: Mapped[str] = mapped_column(String(32), index=True)
    device_model: Mapped[str] = mapped_column(String(120))
    version: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer)
    similarity: Mapped[float | None] = mapped_column(Float, nullable=True)
    features: Mapped[dict[str, Any]] = mapped_column(JSON)
    predicted_time_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_energy: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16), default="open")
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    staleness: Mapped[int | None] = mapped_column(Integer, nullable=True)
    weight: Mapped[float | None] = mapped_column(Float, nullable=True)
    answered_at: Mapped[float | None] = mapped_column(Float, nullable=True)


Index("ix_tasks_status_deadline", TaskRow.status, TaskRow.deadline)
Index("ix_tasks_model_id_answered_at", TaskRow.model_id, TaskRow.answered_at)  # answers per minute


class MeasurementRow(Base):
    __tablename__ = "measurements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(32), index=True)
    device_model: Mapped[str] = mapped_column(String(120), index=True)
    batch_size: Mapped[int] = mapped_column(Integer)
    compute_time_ms: Mapped[float] = mapped_column(Float)
    predicted_time_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    energy: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_energy: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)  # NULL: a DP push sends no loss
    at: Mapped[float] = mapped_column(Float)


class ProfilerRow(Base):
    __tablename__ = "profiler_state"
    key: Mapped[str] = mapped_column(String(120), primary_key=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)


class StrategyRow(Base):
    __tablename__ = "strategy_state"
    model_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[bytes] = mapped_column(LargeBinary)
    updated_at: Mapped[float] = mapped_column(Float)


class EvaluationRow(Base):
    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)
    accuracy: Mapped[float] = mapped_column(Float)
    loss: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)
    reference: Mapped[float | None] = mapped_column(Float, nullable=True)  # 0011: an older model's score


class CounterRow(Base):
    __tablename__ = "counters"
    name: Mapped[str] = mapped_column(String(120), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, default=0)


class AuditRow(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class PromotionRow(Base):
    """Each ``HeadPromoted``, promotion or rollback (its parameters are the version row it wrote): what a
    rollback undoes (server/core/lineage.py)."""

    __tablename__ = "promotions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    source_version: Mapped[int] = mapped_column(Integer)
    previous_model_id: Mapped[str] = mapped_column(String(64))
    previous_version: Mapped[int] = mapped_column(Integer)
    actor: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16), server_default="promotion")  # or "rollback" (0009)


class EnrollmentKeyRow(Base):
    __tablename__ = "enrollment_keys"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)  # SHA-256 hex
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(64))
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_devices: Mapped[int | None] = mapped_column(Integer, nullable=True)  # quota (0010); NULL: the default
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # a join code's end (0012)


class AdminUserRow(Base):
    """A console login (the console's code reads and writes these: server/store/admin.py)."""

    __tablename__ = "admin_users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[float] = mapped_column(Float)
    last_login: Mapped[float | None] = mapped_column(Float, nullable=True)


class AdminSessionRow(Base):
    """A console login session, keyed by the SHA-256 of its cookie value."""

    __tablename__ = "admin_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    username: Mapped[str] = mapped_column(String(64), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class SettingOverrideRow(Base):
    """A setting changed at run time from the console (it outlives a restart)."""

    __tablename__ = "settings_overrides"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON, nullable=True)
    updated_at: Mapped[float] = mapped_column(Float)
    updated_by: Mapped[str] = mapped_column(String(64))


class PrivacyChargeRow(Base):
    """One DP task granted to a device: a Poisson-subsampled Gaussian or a pure ε norm-Laplace event."""

    __tablename__ = "privacy_charges"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    device_id: Mapped[str] = mapped_column(String(32), index=True)
    task_id: Mapped[str] = mapped_column(String(32), unique=True)
    model_id: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)
    noise_multiplier: Mapped[float] = mapped_column(Float)
    sampling_rate: Mapped[float] = mapped_column(Float)
    local_examples: Mapped[int] = mapped_column(Integer)
    mechanism: Mapped[str] = mapped_column(String(64), server_default="dpsgd-poisson-gaussian/1")
    epsilon: Mapped[float] = mapped_column(Float, server_default="0")  # a pure (norm-Laplace) step's ε
    norm_bound: Mapped[float | None] = mapped_column(Float, nullable=True)
    norm_floor: Mapped[float | None] = mapped_column(Float, nullable=True)  # migration 0008


class QueuedPushRow(Base):
    """A validated push an API worker acknowledged and the aggregator has not applied yet (scale-out).

    The row is deleted in the transaction that applies it, so a push is applied exactly once whatever
    crashes (docs/scale-out.md). ``task_id`` is unique: a retry to another worker queues nothing twice."""

    __tablename__ = "push_queue"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(32), unique=True)
    digest: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)  # label counts, loss, time, energy, batch size
    gradient: Mapped[bytes] = mapped_column(LargeBinary)  # float32, little-endian
    enqueued_at: Mapped[float] = mapped_column(Float)


class AggregatorLeaseRow(Base):
    """Who may apply pushes: one row, taken with a new fencing ``token`` that every apply checks."""

    __tablename__ = "aggregator_lease"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(120))
    token: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Float)
