"""The plain records the core's ``Store`` port reads back (server/core/ports.py): models, versions,
leases, devices, enrollment keys, evaluations, measurements and promotions, never ORM rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AnsweredTask",
    "DeviceRecord",
    "EnrollmentKey",
    "EvaluationRecord",
    "Lease",
    "MeasurementRecord",
    "ModelRecord",
    "PromotionRecord",
    "VersionRecord",
]


@dataclass(frozen=True)
class ModelRecord:
    model_id: str
    name: str
    manifest_json: str
    created_at: float
    active: bool
    current_version: int
    status: str
    stop_accuracy: float | None = None
    stop_versions: int | None = None


@dataclass(slots=True)  # thousands are held in memory (core/leases.py)
class Lease:
    """A granted task and, once answered, the body digest and the answer it got: what the lease book
    holds in memory, and what the store gives back for a task granted before a restart."""

    task_id: str
    model_id: str
    device_id: str
    device_model: str
    version: int
    batch_size: int
    features: dict[str, Any]
    predicted_time_ms: float | None
    predicted_energy: float | None
    deadline: float
    status: str = "open"
    digest: str | None = None
    outcome: dict[str, Any] | None = None
    dp_bound: float | None = None  # a DP task's largest possible gradient norm (memory only)
    dp_bound_replaces: bool = False  # the bound replaces max_gradient_norm (a pure step's noise: memory only)
    dp_floor: float | None = None  # a DP task's smallest plausible gradient norm: its noise's (memory only)

    def norm_limit(self, max_gradient_norm: float) -> float:
        """The push's norm limit: the DP bound within max_gradient_norm, or alone when it replaces it."""
        if self.dp_bound is None:
            return max_gradient_norm
        return self.dp_bound if self.dp_bound_replaces else min(max_gradient_norm, self.dp_bound)


@dataclass(frozen=True)
class AnsweredTask:
    task_id: str
    device_model: str
    base_version: int
    outcome: dict[str, Any]
    staleness: int | None
    weight: float | None
    similarity: float | None
    batch_size: int
    answered_at: float | None


@dataclass(frozen=True)
class MeasurementRecord:
    task_id: str
    device_model: str
    batch_size: int
    compute_time_ms: float
    predicted_time_ms: float | None
    energy: float | None
    predicted_energy: float | None
    at: float


@dataclass(frozen=True)
class EvaluationRecord:
    version: int
    accuracy: float
    loss: float
    at: float
    reference: float | None = None  # the same metric of an older model on the same data (evaluation_loop.py)


@dataclass(frozen=True)
class DeviceRecord:
    """An enrolled device as the console lists it (``last_features``: those of its latest task request)."""

    device_id: str
    device_model: str
    created_at: float
    last_seen: float
    tasks_applied: int
    last_features: dict[str, Any] | None
    revoked_at: float | None
    enrollment_key_id: str | None = (
        None  # the key it enrolled with (None: before migration 0010, or in process)
    )


@dataclass(frozen=True)
class EnrollmentKey:
    """A stored enrollment key (its secret is shown once at creation and kept only as a SHA-256).
    ``max_devices``: its quota; None means the coordinator's default (FLEET_ENROLL_QUOTA_PER_KEY).
    ``expires_at`` (unix s): a join code's end, after which it enrolls nothing (None: never expires)."""

    key_id: str
    name: str
    created_at: float
    created_by: str
    revoked_at: float | None
    max_devices: int | None = None
    expires_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True)
class PromotionRecord:
    """A stored ``HeadPromoted`` without its parameters: what a rollback needs."""

    model_id: str
    version: int
    source_version: int
    previous_model_id: str
    previous_version: int
    actor: str
    at: float
    kind: str = "promotion"  # or "rollback"


@dataclass(frozen=True)
class VersionRecord:
    """A retained version and its lineage: ``origin`` is "trained" (pushes on ``version - 1``),
    "initial" (the bundle's parameters), "promotion" (``source_version``'s parameters, promoted) or
    "rollback" (``source_version``'s parameters, restored); ``note`` is the operator's."""

    version: int
    created_at: float
    origin: str = "trained"
    source_version: int | None = None
    note: str | None = None
