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
    last_seen: Mapped[float] = mapped_column(Float)
    tasks_applied: Mapped[int] = mapped_column(Integer, default=0)


class ModelRow(Base):
    __tablename__ = "models"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    manifest: Mapped[str] = mapped_column(Text)
    train_onnx: Mapped[bytes] = mapped_column(LargeBinary)
    infer_onnx: Mapped[bytes] = mapped_column(LargeBinary)
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
    loss: Mapped[float] = mapped_column(Float)
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
