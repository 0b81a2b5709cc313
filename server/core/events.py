"""Plain domain events: everything the core asks storage to remember, and nothing about tables.

The core emits these; a ``Store`` (server/core/ports.py) writes a sequence of them in one
transaction, in order. The SQL store maps them to rows (server/store/sql.py); a test fake keeps them
in dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrivacyCharged:
    """A DP task entered its device's privacy ledger: one Poisson-subsampled Gaussian step, or (issue 16) a
    pure ε-DP norm-Laplace step of AUDP/MAPA (``epsilon`` > 0; then σ is λ/G and q is b/N, not accounted)."""

    device_id: str
    task_id: str
    model_id: str
    at: float
    noise_multiplier: float
    sampling_rate: float
    local_examples: int
    mechanism: str = "dpsgd-poisson-gaussian/1"  # rows written before migration 0004 are Gaussian
    epsilon: float = 0.0  # a pure step's ε (basic composition); 0 for a Gaussian step (RDP accounted)
    norm_bound: float | None = None  # the push's norm bound (rows before migration 0008: pure steps only)
    norm_floor: float | None = None  # the least norm its noise gives a push (migration 0008; None: none)


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
    privacy: PrivacyCharged | None = None  # written in the grant's transaction


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
    device_id: str
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
    loss: float | None  # None: a DP push (no loss is sent)
    at: float
    new_version: NewVersion | None = None
    queue_id: int | None = None  # scale-out: the queued push this applies (its row goes in the same commit)


@dataclass(frozen=True)
class PushQueued:
    """Scale-out: an API worker validated a push and queues it for the aggregator; the device is told so
    once this is committed. ``outcome`` is that answer, kept for retries like an applied push's."""

    task_id: str
    digest: str
    outcome: dict[str, Any]
    meta: dict[str, Any]
    gradient: bytes
    at: float


@dataclass(frozen=True)
class PushRefused:
    """A DP task's push was refused: its digest is kept on the still-open task, so a different body for
    the same task is refused too (the server saw the first one; only one release is charged)."""

    task_id: str
    digest: str
    at: float


@dataclass(frozen=True)
class PushDropped:
    """Scale-out: the aggregator could not apply a queued push (its model stopped training, a promotion
    superseded its version): the row leaves the queue and the task says why."""

    task_id: str
    queue_id: int
    reason: str
    at: float


@dataclass(frozen=True)
class Fenced:
    """Scale-out: commit only if the aggregator lease still carries ``token``, and extend it. Written last
    in each of the aggregator's transactions, so a second or stale aggregator can commit nothing."""

    holder: str
    token: int
    expires_at: float


@dataclass(frozen=True)
class StatusChanged:
    model_id: str
    status: str  # training | paused | finished
    version: int
    actor: str
    at: float
    previous: str | None = None  # the status before (the audit log's "old")


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
    reference: float | None = None  # the metric of the model as it was FLEET_EVAL_REFERENCE_AGE_S before
    served: bytes | None = None  # the parameters scored, when an average and not the version's own


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
    dp_onnx: bytes | None = None  # the DP-SGD graph, if the model has one


@dataclass(frozen=True)
class DeviceEnrolled:
    device_id: str
    device_model: str
    token_hash: str
    at: float
    install_hash: str | None = None  # SHA-256 of the install's secret: enrolling again keeps the identity
    enrollment_key_id: str | None = None  # the key it enrolled with: its quota counts this device


@dataclass(frozen=True)
class DeviceReenrolled:
    """An install enrolled again with its secret: same device id (its privacy ledger goes on), a new
    token; the old one stops working."""

    device_id: str
    token_hash: str
    at: float


@dataclass(frozen=True)
class DeviceRevoked:
    """A device's token stops working (its row and its tasks stay, for the figures)."""

    device_id: str
    actor: str
    at: float


@dataclass(frozen=True)
class EnrollmentKeyCreated:
    """A stored enrollment key besides the bootstrap one; only its SHA-256 is kept. ``max_devices``: its
    quota (None: the coordinator's default at each enrollment); ``expires_at``: a join code's end."""

    key_id: str
    name: str
    key_hash: str
    actor: str
    at: float
    max_devices: int | None = None
    expires_at: float | None = None


@dataclass(frozen=True)
class EnrollmentKeyRevoked:
    key_id: str
    actor: str
    at: float


@dataclass(frozen=True)
class HeadPromoted:
    """A retained version's parameters became the head that trains, as ``version`` of ``model_id`` (one
    above its newest); ``model_id`` becomes the active model. ``previous_*`` is the head it replaced.
    ``kind``: "promotion", or "rollback" (it restores the head an earlier promotion replaced: the
    new version's lineage names ``source_version`` as the one it restored, server/core/lineage.py)."""

    model_id: str
    version: int
    source_version: int
    params: bytes
    previous_model_id: str
    previous_version: int
    actor: str
    at: float
    kind: str = "promotion"
    note: str | None = None  # the operator's note on the new version (server/core/lineage.py clean_note)


@dataclass(frozen=True)
class VersionNoted:
    """The operator's note on a version was set (None: cleared)."""

    model_id: str
    version: int
    note: str | None
    actor: str
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
    | PushQueued
    | PushDropped
    | PushRefused
    | Fenced
    | StatusChanged
    | StopCriterionSet
    | EvaluationRecorded
    | LeasesExpired
    | CounterBumped
    | ModelAdded
    | DeviceEnrolled
    | DeviceReenrolled
    | DeviceRevoked
    | EnrollmentKeyCreated
    | EnrollmentKeyRevoked
    | HeadPromoted
    | VersionNoted
    | StateCheckpoint
)
