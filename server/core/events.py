"""Plain domain events: everything the core asks storage to remember, and nothing about tables.

The core emits these; a ``Store`` (server/core/ports.py) writes a sequence of them in one
transaction, in order. The SQL store maps them to rows (server/store/sql.py); a test fake keeps them
in dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskGranted:
    """A lease was handed to a device (written behind the answer: a lost grant only costs a retry)."""

    task_id: str
    model_id: str
    device_id: str
    device_model: str
    version: int
    batch_size: int
    similarity: float | None
    features: dict[str, Any]
    predicted_time_ms: float | None
    predicted_energy: float | None
    created_at: float
    deadline: float


@dataclass(frozen=True)
class NewVersion:
    """A model step produced by a push: the version's float32 parameters."""

    model_id: str
    version: int
    params: bytes


@dataclass(frozen=True)
class PushApplied:
    """A gradient was weighed (and maybe stepped): the answer told to the device and what it measured."""

    task_id: str
    device_model: str
    digest: str
    outcome: dict[str, Any]
    staleness: int
    weight: float
    batch_size: int
    compute_time_ms: float
    predicted_time_ms: float | None
    energy: float | None
    predicted_energy: float | None
    loss: float
    at: float
    new_version: NewVersion | None = None


@dataclass(frozen=True)
class StatusChanged:
    model_id: str
    status: str  # training | paused | finished
    version: int
    actor: str
    at: float


@dataclass(frozen=True)
class StopCriterionSet:
    """The settings of when training finishes (target accuracy, or a number of versions)."""

    model_id: str
    target_accuracy: float | None
    max_versions: int | None
    actor: str
    at: float


@dataclass(frozen=True)
class EvaluationRecorded:
    model_id: str
    version: int
    accuracy: float
    loss: float
    at: float


@dataclass(frozen=True)
class LeasesExpired:
    """Every open lease with a deadline before ``before`` is expired."""

    before: float


@dataclass(frozen=True)
class CounterBumped:
    name: str
    by: int = 1


@dataclass(frozen=True)
class ModelAdded:
    """A model with its version 0 becomes the active one."""

    model_id: str
    name: str
    manifest_json: str
    train_onnx: bytes
    infer_onnx: bytes
    init_params: bytes
    actor: str
    at: float


@dataclass(frozen=True)
class DeviceEnrolled:
    device_id: str
    device_model: str
    token_hash: str
    at: float


@dataclass(frozen=True)
class StateCheckpoint:
    """The strategy's and the profiler's state after exactly the pushes written before it."""

    model_id: str | None = None
    strategy: dict[str, Any] | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # "device:<model>" / "cold"
    at: float = 0.0


Event = (
    TaskGranted
    | PushApplied
    | StatusChanged
    | StopCriterionSet
    | EvaluationRecorded
    | LeasesExpired
    | CounterBumped
    | ModelAdded
    | DeviceEnrolled
    | StateCheckpoint
)
