"""What the coordinator does with a push, as parts it is given (server/compose.py picks them per role).

A push answering a live lease of the running model goes through the ``PushCheck``s, then to the
``PushSink``: the single process and the scale-out aggregator apply it now (``ApplyNow``: the strategy,
the profiler, maybe a new version); an API worker queues it for the aggregator (``Enqueue``) and
answers ``queued``. Whatever the sink, the coordinator records the sink's event in its journal under its
lock and keeps the answer for retries. Checks (besides the lease's expiry and the run's, which the
coordinator always makes): a device's push gets ``DEVICE_CHECKS`` (a DP push carries nothing un-noised,
its result fits the model, its gradient's norm its bound); the aggregator takes what an API worker
checked (``TRUSTED``: none again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from server.core.catalog import Catalog
from server.core.errors import InvalidInput, StateBehind
from server.core.events import Event, NewVersion, PushApplied, PushQueued
from server.core.figures import RecentFigures
from server.core.leases import Lease
from server.core.ports import Arrival, Profiler
from server.core.privacy import poisson_ceiling
from server.core.run import TrainingRun
from server.core.types import PushOutcome, TaskResult
from server.core.validation import validate_result

__all__ = [
    "DEVICE_CHECKS",
    "AboveNoiseFloor",
    "TRUSTED",
    "ApplyNow",
    "Enqueue",
    "Push",
    "PushCheck",
    "PushSink",
    "PrivateMeta",
    "ValidGradient",
    "queued_meta",
    "queued_result",
]


@dataclass(frozen=True, slots=True)
class Push:
    """An answer to a lease on the running model, as the checks and the sink see it."""

    run: TrainingRun
    lease: Lease
    result: TaskResult
    now: float
    max_gradient_norm: float  # the coordinator's current bound (a live setting)
    queue_id: int | None = None  # the aggregator's: the queue row the push came from


class PushCheck(Protocol):
    """One condition a push for a live lease of the running model must meet before a sink takes it."""

    def check(self, push: Push) -> None:
        """Raise a ``CoordinatorError`` (Gone, InvalidInput, ...) if the push may not be taken."""
        ...


class PushSink(Protocol):
    """Where an accepted push goes. Called under the coordinator's lock."""

    def accept(self, push: Push) -> tuple[PushOutcome, Event]:
        """The device's answer, and the event that makes the push durable (the coordinator journals it)."""
        ...


# -- checks ------------------------------------------------------------------------------------
class ValidGradient:
    """The result fits the model (shapes, finite values) and the gradient's norm stays within the
    bound: ``max_gradient_norm``, or a DP task's own (server/core/validation.py)."""

    def check(self, push: Push) -> None:
        lease = push.lease
        validate_result(
            push.run.manifest,
            push.result,
            max_gradient_norm=lease.norm_limit(push.max_gradient_norm),
            granted_batch_size=lease.batch_size
            if lease.dp_bound is None
            else poisson_ceiling(lease.batch_size),
        )


class PrivateMeta:
    """A DP task's push carries nothing data-dependent but its noised gradient (issue 27): no loss (its
    sensitivity is unbounded), no label counts, and the terms' expected batch B as its batch size, never
    the Poisson-sampled one. A DP lease is one the privacy ledger bounded (``dp_bound``); its batch size
    is the terms' B."""

    def check(self, push: Push) -> None:
        lease, result = push.lease, push.result
        if lease.dp_bound is None:
            return
        if result.loss is not None:
            raise InvalidInput("DP is on: a push may not carry a loss (it is not noised); send null")
        if result.label_counts is not None:
            raise InvalidInput("DP is on: a push may not carry label_counts (they are not noised); send null")
        if result.batch_size != lease.batch_size:
            raise InvalidInput(
                f"DP is on: batch_size must be the terms' expected_batch {lease.batch_size}, not the sampled"
                f" batch's size (got {result.batch_size})"
            )


class AboveNoiseFloor:
    """A DP push's norm is at least what its noise alone gives (``Lease.dp_floor``, server/core/dp_bounds.py):
    below it the push cannot have been noised as granted (an all-zero gradient, the exact clipped mean), so
    it is refused before it touches the model (finding 15)."""

    def check(self, push: Push) -> None:
        floor = push.lease.dp_floor
        if floor is None:
            return
        norm = float(np.linalg.norm(push.result.gradient))
        if not norm >= floor:
            raise InvalidInput(
                f"gradient norm {norm:.3g} is below {floor:.3g}, the least the DP noise alone gives: the push"
                " was not noised as granted"
            )


# a push as a device sent it
DEVICE_CHECKS: Sequence[PushCheck] = (PrivateMeta(), ValidGradient(), AboveNoiseFloor())
TRUSTED: Sequence[PushCheck] = ()  # the aggregator: an API worker ran DEVICE_CHECKS before queueing


# -- sinks -------------------------------------------------------------------------------------
class ApplyNow:
    """Apply the push: the run's strategy weighs it (and maybe steps the model), the profiler learns
    from its cost. The single process's and the aggregator's sink."""

    def __init__(
        self, *, profiler: Profiler, catalog: Catalog, recent: RecentFigures, touched: set[str]
    ) -> None:
        self.profiler, self.catalog, self.recent = profiler, catalog, recent
        self.touched = touched  # device models whose profile changed since the last checkpoint

    def accept(self, push: Push) -> tuple[PushOutcome, Event]:
        run, lease, result, now = push.run, push.lease, push.result, push.now
        if lease.version > run.version:  # only what applies checks this: an API worker may lag its peers
            raise StateBehind(f"a push on version {lease.version}, beyond this process's {run.version}")
        arrival = Arrival(
            task_id=lease.task_id,
            device_id=lease.device_id,
            base_version=lease.version,
            staleness=run.version - lease.version,
            gradient=result.gradient,
            label_counts=result.label_counts,
            batch_size=result.batch_size,
            loss=result.loss,
            received_at=now,
        )
        weight = run.strategy.receive(arrival)
        new_params = run.strategy.aggregate(run.params) if run.strategy.ready(now) else None
        version = run.version + (new_params is not None)
        outcome = PushOutcome(
            lease.task_id,
            arrival.staleness,
            weight,
            version,
            applied=new_params is not None,
            tau_thres=run.strategy.describe().get("tau_thres"),
        )
        self.profiler.observe(
            lease.device_model, lease.features, result.batch_size, result.compute_time_ms, result.energy
        )
        self.touched.add(lease.device_model)
        stored = None
        if new_params is not None:
            stored = new_params.astype("<f4", copy=False).tobytes()
            run.params, run.version = new_params, version
            self.catalog.remember(run.model_id, version, stored)
        event = PushApplied(
            task_id=lease.task_id,
            device_id=lease.device_id,
            device_model=lease.device_model,
            digest=result.digest,
            outcome=outcome.to_dict(),
            staleness=arrival.staleness,
            weight=weight,
            batch_size=result.batch_size,
            compute_time_ms=result.compute_time_ms,
            predicted_time_ms=lease.predicted_time_ms,
            energy=result.energy,
            predicted_energy=lease.predicted_energy,
            loss=result.loss,
            at=now,
            new_version=None if stored is None else NewVersion(run.model_id, version, stored),
            queue_id=push.queue_id,
        )
        self.recent.weights.append(weight)
        if lease.predicted_time_ms is not None:
            self.recent.timings.append((lease.predicted_time_ms, result.compute_time_ms))
        return outcome, event


class Enqueue:
    """Queue the push for the aggregator (docs/scale-out.md): an API worker's sink. The device is
    answered ``queued`` once the queue row is committed; the weight and the version it makes are the
    aggregator's to decide, so the worker's training state never changes."""

    def accept(self, push: Push) -> tuple[PushOutcome, Event]:
        run, lease, result = push.run, push.lease, push.result
        outcome = PushOutcome(
            lease.task_id, run.version - lease.version, 0.0, run.version, applied=False, queued=True
        )
        gradient = np.ascontiguousarray(result.gradient, dtype="<f4").tobytes()
        meta = queued_meta(result)
        event = PushQueued(lease.task_id, result.digest, outcome.to_dict(), meta, gradient, push.now)
        return outcome, event


def queued_meta(result: TaskResult) -> dict[str, Any]:
    """What the aggregator needs of a push besides its gradient (the lease it reads from the task row)."""
    return {
        "label_counts": None if result.label_counts is None else [int(c) for c in result.label_counts],
        "loss": None if result.loss is None else float(result.loss),
        "compute_time_ms": float(result.compute_time_ms),
        "energy": None if result.energy is None else float(result.energy),
        "batch_size": int(result.batch_size),
    }


def queued_result(meta: dict[str, Any], gradient: bytes, digest: str) -> TaskResult:
    """The result ``Enqueue`` queued, back from its row (``queued_meta`` and the gradient's bytes)."""
    return TaskResult(
        label_counts=None if meta.get("label_counts") is None else np.asarray(meta["label_counts"], np.int64),
        loss=None if meta.get("loss") is None else float(meta["loss"]),
        compute_time_ms=float(meta["compute_time_ms"]),
        energy=meta.get("energy"),
        batch_size=int(meta["batch_size"]),
        gradient=np.frombuffer(gradient, dtype="<f4"),
        digest=digest,
    )
