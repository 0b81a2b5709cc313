"""The core's three ports: what it needs from a profiler, from storage and from an aggregation
strategy, as typing.Protocols.

The coordinator depends on these and on nothing concrete. ``Strategy`` is implemented by every class
in server/strategies/ (their shared base class, server/strategies/base.py, subclasses it; the
strategies depend on the core, never the reverse), with ``Arrival`` and ``TaskTerms`` the values it
takes and gives. ``Profiler`` is implemented by I-Prof
(profiler/iprof.py), MAUI (profiler/maui.py), the round-robin dispatcher that alternates them
(profiler/dispatch.py) and the simulator's fixed-size ``BatchSizer`` (sim/harness.py). ``Store`` is
implemented by the SQL store (server/store/sql.py) and by an in-memory fake in the tests. Writes go
through ``Store.commit`` as plain domain events (server/core/events.py); reads return the plain
records of server/core/stored.py (re-exported here), never ORM rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from server.core.events import Event, PrivacyCharged
from server.core.stored import (
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

__all__ = [
    "AnsweredTask",
    "Arrival",
    "BatchDecision",
    "DeviceRecord",
    "EnrollmentKey",
    "EvaluationRecord",
    "Lease",
    "MeasurementRecord",
    "ModelRecord",
    "Profiler",
    "PromotionRecord",
    "ReferenceGradient",
    "Store",
    "Strategy",
    "TaskTerms",
    "VersionRecord",
]


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """A profiler's answer for one task request: L, and the numbers behind it for logs and the console."""

    batch_size: int
    time_bound: float | None = None
    energy_bound: float | None = None
    predicted_time_ms: float | None = None
    predicted_energy: float | None = None
    source: str = "fixed"  # "cold" | "personal" (I-Prof), "maui", "fixed" (a given size)


@runtime_checkable
class Profiler(Protocol):
    """Sizes each task's mini-batch to the SLOs, learns from what each task cost, and persists state."""

    time_slo_ms: float
    energy_slo: float | None
    min_batch: int
    max_batch: int

    def batch_size(self, device_model: str, features: Mapping[str, Any]) -> BatchDecision: ...

    def observe(
        self,
        device_model: str,
        features: Mapping[str, Any],
        batch_size: int,
        time_ms: float,
        energy: float | None = None,
    ) -> Any: ...

    def device_models(self) -> list[str]:
        """The device models with a personal model (the state that ``device_state`` returns)."""
        ...

    def device_state(self, device_model: str) -> dict[str, Any]: ...

    def load_device_state(self, device_model: str, state: Mapping[str, Any]) -> Any: ...

    def cold_state(self) -> dict[str, Any]: ...

    def load_cold_state(self, state: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class Arrival:
    """A validated gradient that reached the coordinator, with what a strategy may weigh it by. A DP
    task's arrival has no ``label_counts`` and no ``loss`` (None): a strategy that needs them declares it
    (``Strategy.reads``) and is refused with DP on (server/compose.py)."""

    task_id: str
    device_id: str
    base_version: int
    staleness: int
    gradient: np.ndarray
    label_counts: np.ndarray | None
    batch_size: int
    loss: float | None
    received_at: float


@dataclass(frozen=True)
class TaskTerms:
    """What a strategy adds to a task grant (similarity for the controller, DP parameters later)."""

    similarity: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Strategy(Protocol):
    """Turns arriving gradients into model updates. No I/O, no clock: the coordinator passes ``now``
    in, persists ``state_dict()`` with each update, and calls ``terms_for`` and ``admit`` at task time,
    then ``receive`` on each arrival, ``ready``, and ``aggregate`` when it is."""

    name: ClassVar[str]

    def on_register(self, device_id: str) -> None:
        """A device enrolled."""
        ...

    def terms_for(self, *, device_id: str, label_counts: np.ndarray | None) -> TaskTerms:
        """Per-task terms handed out with a grant."""
        ...

    def admit(self, *, device_id: str, version: int, now: float) -> str | None:
        """A reason to tell this device to wait (e.g. "round_full"), or None to grant it a task."""
        ...

    def receive(self, arrival: Arrival) -> float:
        """Weigh and buffer one gradient; returns its weight."""
        ...

    def ready(self, now: float) -> bool:
        """Whether the buffer should be applied now."""
        ...

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        """The new parameters from what was buffered, as a new array; empties the buffer."""
        ...

    def serving(self, params: np.ndarray) -> np.ndarray:
        """The parameters to serve (evaluate, export for inference) while the model holds ``params``."""
        ...

    def describe(self) -> dict[str, Any]:
        """Current figures worth showing (τ_thres, counters)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-able values and numpy arrays; restored by ``load_state_dict``."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class ReferenceGradient(Protocol):
    """The loss gradient on a few samples the server trusts, at the parameters the model holds now: what
    a scoring defence (server/strategies/trusted_score.py, Zeno++ and AFLGuard) measures a device's
    gradient against. The core knows no data and no ONNX: the composition root implements it with the
    model's own training graph, the one devices run (server/compose.py ``TrustedGradient``)."""

    def gradient(self, label: int | None = None) -> np.ndarray | None:
        """g_s at the current parameters (flat float32, the manifest's order) on the trusted samples, or on
        those of one ``label`` only; None while no model trains or when no trusted sample has that label."""
        ...

    def head(self) -> tuple[slice, slice] | None:
        """The output layer's weight and bias in the flat vector (``Manifest.head``) of the model that
        trains now; None while none trains or when its model ends otherwise."""
        ...

    def templates(self) -> np.ndarray | None:
        """Each class's mean features at the output layer's input over the trusted samples of that class,
        less their mean over the classes (classes × width, 0 for a class with none), at the current
        parameters; None while no model trains or when it has no softmax head (label-check's row test)."""
        ...


@runtime_checkable
class Store(Protocol):
    """Durable storage of the core: one write method taking domain events, and plain-record reads."""

    def commit(self, events: Sequence[Event]) -> None:
        """Write ``events`` in order, in one transaction: all of them are durable, or none is."""
        ...

    def ping(self) -> None:
        """Raise if storage is unreachable (readiness)."""
        ...

    # models and versions
    def active_model(self) -> ModelRecord | None: ...
    def model(self, model_id: str) -> ModelRecord | None: ...
    def models(self) -> list[ModelRecord]: ...
    def graph(self, model_id: str, which: str) -> bytes | None: ...
    def version_params(self, model_id: str, version: int) -> bytes | None: ...
    def served_params(self, model_id: str, version: int) -> bytes | None:
        """The parameters served at an evaluated version when they were not its own (None: as trained)."""
        ...

    def versions(self, model_id: str) -> list[VersionRecord]: ...  # oldest first

    # devices and tasks
    def device_by_token(self, token_hash: str) -> Device | None:
        """The device of a token, None if unknown or revoked."""
        ...

    def device(self, device_id: str) -> DeviceRecord | None: ...
    def device_by_install(self, install_hash: str) -> DeviceRecord | None:
        """The device an install enrolled as (by its secret's SHA-256), revoked or not; None if new."""
        ...

    def count_devices(self, *, enrollment_key_id: str | None = None) -> int:
        """All devices, or those one enrollment key enrolled (revoked ones included: they keep their slot)."""
        ...

    def devices_per_key(self) -> dict[str, int]:
        """Devices per enrollment key id (revoked included; devices of no known key left out)."""
        ...

    def enrollment_keys(self) -> list[EnrollmentKey]: ...
    def enrollment_key_by_hash(self, key_hash: str) -> EnrollmentKey | None: ...
    def last_promotion(self) -> PromotionRecord | None: ...
    def head_changes(self) -> list[PromotionRecord]:
        """Every promotion and rollback, oldest first (operator actions: a few, never per push)."""
        ...

    def lease(self, task_id: str) -> Lease | None: ...
    def privacy_charges(self) -> list[PrivacyCharged]: ...  # every DP task's ledger entry, oldest first
    def answered_tasks(self, model_id: str, limit: int) -> list[AnsweredTask]: ...

    # state saved by checkpoints
    def strategy_state(self, model_id: str) -> dict[str, Any] | None: ...
    def profiler_states(self) -> dict[str, dict[str, Any]]: ...
    def counters(self, prefix: str) -> dict[str, int]: ...

    # figures
    def evaluations(self, model_id: str) -> list[EvaluationRecord]: ...
    def latest_evaluation(self, model_id: str) -> EvaluationRecord | None: ...
    def measurements(self, device_model: str, limit: int) -> list[MeasurementRecord]: ...
    def measurement_counts(self) -> dict[str, tuple[int, float]]: ...

    # the console's pages: bounded queries (a page of rows, or counts), never every row
    def devices(
        self,
        *,
        offset: int = 0,
        limit: int = 100,
        device_model: str | None = None,
        enrollment_key_id: str | None = None,
    ) -> list[DeviceRecord]:
        """A page of devices, the most recently seen first (of one model, one key, if given)."""
        ...

    def device_model_counts(
        self, now: float, active_within_s: float = 300.0
    ) -> dict[str, tuple[int, int, float]]:
        """Per device model: (devices, non-revoked devices seen within ``active_within_s`` of ``now``,
        latest last_seen)."""
        ...

    def task_counts(self, model_id: str) -> dict[str, int]:
        """The model's tasks by status (open, applied, expired)."""
        ...

    def answers_per_minute(self, model_id: str, since: float) -> list[tuple[float, int]]:
        """Tasks answered since ``since``, per minute: (the minute's start, count), oldest first."""
        ...
