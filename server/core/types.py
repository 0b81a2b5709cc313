"""Plain values in and out of the coordinator core (no HTTP, no ORM)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Device:
    device_id: str
    device_model: str


@dataclass(frozen=True)
class TaskRequest:
    """What a device sends when it asks for work: who it is, its state, its local label counts."""

    device: Device
    features: dict[str, float | None]
    label_counts: np.ndarray


@dataclass(frozen=True)
class TaskGrant:
    task_id: str
    model_id: str
    version: int
    batch_size: int
    lease_seconds: float
    lease_deadline: float
    slo_time_ms: float
    predicted_time_ms: float | None
    similarity: float | None
    dp: dict[str, Any] | None = None


@dataclass(frozen=True)
class Rejection:
    """A refused task request: why, and when to ask again."""

    reason: str
    retry_after: float
    detail: str
    finished: bool = False


@dataclass(frozen=True)
class TaskResult:
    """A device's answer to a task; ``digest`` identifies the exact body for idempotent retries."""

    label_counts: np.ndarray
    loss: float
    compute_time_ms: float
    energy: float | None
    batch_size: int
    gradient: np.ndarray
    digest: str


@dataclass(frozen=True)
class PushOutcome:
    task_id: str
    staleness: int
    weight: float
    version: int
    applied: bool
    duplicate: bool = False
    tau_thres: float | None = None  # the strategy's staleness threshold when it weighed this gradient

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "staleness": self.staleness,
            "weight": self.weight,
            "version": self.version,
            "applied": self.applied,
            "tau_thres": self.tau_thres,
        }


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of the training model at one version (for evaluation and inference export)."""

    model_id: str
    version: int
    params: np.ndarray
