"""Plain values in and out of the coordinator core (no HTTP, no ORM).

The messages a device sees (grant, rejection, push outcome) are the wire contract's own types,
re-exported from ``fleet_protocol`` so the core and the device cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet_protocol import PushOutcome, Rejection, TaskGrant

__all__ = ["Device", "PushOutcome", "Rejection", "Snapshot", "TaskGrant", "TaskRequest", "TaskResult"]


@dataclass(frozen=True)
class Device:
    device_id: str
    device_model: str


@dataclass(frozen=True)
class TaskRequest:
    """What a device sends when it asks for work: who it is, its state, its local label counts (None:
    not sent, as under DP, where the coordinator refuses them)."""

    device: Device
    features: dict[str, float | None]
    label_counts: np.ndarray | None
    local_examples: int | None = None  # the device's N (bucketed under DP): DP tasks sample from it


@dataclass(frozen=True)
class TaskResult:
    """A device's answer to a task; ``digest`` identifies the exact body for idempotent retries. A DP
    task's answer has no ``label_counts`` and no ``loss`` (None): they are not noised."""

    label_counts: np.ndarray | None
    loss: float | None
    compute_time_ms: float
    energy: float | None
    batch_size: int
    gradient: np.ndarray
    digest: str


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of the model served at one version (for evaluation and inference export): its
    parameters are the strategy's average of the versions when ``averaged`` (``Strategy.serving``)."""

    model_id: str
    version: int
    params: np.ndarray
    averaged: bool = False
