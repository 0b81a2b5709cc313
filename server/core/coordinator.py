"""The coordinator core: hands out learning tasks and applies returned gradients. No HTTP here.

One model trains at a time. A push is applied in memory under one lock, in order, and acknowledged
only once the journal (server/core/journal.py) has committed it: pushes arriving together share one
transaction (group commit), so what a device was told survives a crash without one fsync per push.
The core depends on two ports (server/core/ports.py): a ``Profiler`` and a ``Store``; every write is
a domain event (server/core/events.py) handed to the journal or, when nothing waits on push order
(a new model, an enrollment), to the store directly. The API, the simulator and the tests all drive
this class; the clock is injected (wall time in server/, virtual time in sim/, where
``durable=False`` writes in batches and never waits).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fleet_protocol import Bundle
from server.core.accounting import LOCAL_SGD
from server.core.admission import AdmissionController
from server.core.catalog import Catalog, ModelInfo
from server.core.devices import DeviceRegistry
from server.core.errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidInput,
    NotFound,
    TrainingFinished,
)
from server.core.events import (
    CounterBumped,
    LeasesExpired,
    NewVersion,
    PushApplied,
    StateCheckpoint,
)
from server.core.figures import RecentFigures
from server.core.journal import Journal, Ticket
from server.core.leases import Lease, LeaseBook
from server.core.ports import Arrival, Profiler, Store, Strategy
from server.core.privacy import PRIVACY_RETRY_AFTER, PrivacyLedger, PrivacyPolicy, Refusal, poisson_ceiling
from server.core.profiles import ProfilerView
from server.core.promotion import SUPERSEDED, floor_of, superseded
from server.core.run import TrainingRun, granted
from server.core.steering import Steering
from server.core.types import Device, PushOutcome, Rejection, Snapshot, TaskGrant, TaskRequest, TaskResult
from server.core.validation import validate_features, validate_result

log = logging.getLogger("fleet.server")
ANSWERED = ("applied", "queued", "dropped")  # a task's statuses once its push was accepted


class Coordinator(Steering):
    validates_pushes = True  # the scale-out aggregator applies pushes an API worker already validated
    def __init__(
        self,
        *,
        store: Store,
        profiler: Profiler,
        strategy_factory: Callable[[], Strategy],
        admission: AdmissionController | None = None,
        clock: Callable[[], float] = time.time,
        lease_seconds: float = 60.0,
        max_gradient_norm: float = 1e4,
        version_retention: int = 200,
        retry_after: float = 2.0,
        version_policy: Callable[[TaskRequest, int], int] | None = None,
        durable: bool = True,
        privacy: PrivacyPolicy | None = None,
    ) -> None:
        self.store = store
        self.profiler = profiler
        self.strategy_factory = strategy_factory
        self.admission = admission or AdmissionController()
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.max_gradient_norm = max_gradient_norm
        self.version_retention = version_retention
        self.retry_after = retry_after
        # which version a task is computed on (default: the newest); the experiments' staleness
        # controller (sim/staleness.py) hands out older retained versions to impose τ
        self.version_policy = version_policy
        self.privacy_policy = privacy
        self.privacy: PrivacyLedger | None = None  # loaded from storage in start() when DP is on
        self.devices = DeviceRegistry(store=store, clock=clock)
        self.catalog = Catalog(store=store, clock=clock)
        self.profiles = ProfilerView(profiler, store)
        self.run: TrainingRun | None = None
        self.recent = RecentFigures()
        self._lock = threading.RLock()
        self._promoting = threading.RLock()  # one promotion or rollback at a time (taken before _lock)
        self._last_expiry = 0.0
        self.leases = LeaseBook()
        self._durable: dict[str, Ticket] = {}  # recent answers' tickets: a retry waits for durability too
        self._dirty_profiles: set[str] = set()
        # why storage cannot be used (a commit failed), until the journal has reloaded the durable state
        self.degraded: str | None = None
        self.journal = Journal(
            store=store,
            checkpoint=self._checkpoint,
            on_failure=self._journal_failed,
            reload=self._reload,
            durable=durable,
        )

    # -- start-up and models -------------------------------------------------------------------
    def start(self) -> None:
        """Load the active model, strategy state and profiler state from storage."""
        for key, state in self.store.profiler_states().items():
            self._load_profile(key, state)
        self.recent.rejections = self.store.counters("rejected:")
        if self.privacy_policy is not None:
            self.privacy = PrivacyLedger(self.privacy_policy, self.store.privacy_charges())
        record = self.catalog.active()
        if record is not None:
            self._activate(record.model_id)

    def _load_profile(self, key: str, state: dict[str, Any] | None) -> None:
        if key == "cold" and state is not None:
            self.profiler.load_cold_state(state)
        elif key.startswith("device:"):
            self.profiler.load_device_state(key.removeprefix("device:"), state)

    def save_cold_profile(self) -> None:
        """Persist the profiler's cold-start model (after a bootstrap dataset was loaded or refitted)."""
        cold = {"cold": self.profiler.cold_state()}
        self.store.commit([StateCheckpoint(profiles=cold, at=self.clock())])

    def _activate(self, model_id: str) -> None:
        row = self.catalog.record(model_id)
        strategy = self.strategy_factory()
        state = self.store.strategy_state(model_id)
        if state is not None:
            strategy.load_state_dict(state)
        params = self.catalog.params(model_id, row.current_version).astype(np.float32)
        self.run = TrainingRun(
            model_id=model_id,
            manifest=self.catalog.manifest(model_id),
            params=params,
            version=row.current_version,
            status=row.status,
            strategy=strategy,
            stop_accuracy=row.stop_accuracy,
            stop_versions=row.stop_versions,
            floor=floor_of(self.store, model_id),
        )
        log.info("training %s from version %d with %r", model_id, row.current_version, strategy)

    def add_model(self, bundle: Bundle, *, name: str | None = None, actor: str = "admin") -> ModelInfo:
        with self._lock:
            info = self.catalog.add(bundle, name=name, actor=actor)
            self._activate(info.model_id)
            return info

    def enroll(self, device_model: str) -> tuple[Device, str]:
        """A new device identity and its bearer token (shown once, stored hashed)."""
        device, token = self.devices.enroll(device_model)
        with self._lock:
            if self.run is not None:
                self.run.strategy.on_register(device.device_id)
        return device, token

    # -- tasks ---------------------------------------------------------------------------------
    def request_task(self, request: TaskRequest) -> TaskGrant | Rejection:
        """Size the mini-batch with the profiler, ask the controller, and lease a task."""
        with self._lock:
            run = self.run
            if self.degraded is not None:
                return self._reject("storage_unavailable", f"storage is unavailable: {self.degraded}", 2.0)
            if run is None:
                return self._reject("no_model", "no model is training", 30.0)
            if run.status == "finished":
                return Rejection("training_finished", 300.0, "training finished")
            if run.status == "paused":
                return self._reject("paused", "training is paused", self.retry_after * 5)
            counts = np.asarray(request.label_counts)
            if counts.shape != (run.manifest.num_classes,) or (counts < 0).any():
                raise InvalidInput(f"label_counts must be {run.manifest.num_classes} non-negative counts")
            validate_features(request.features)
            decision = self.profiler.batch_size(request.device.device_model, request.features)
            terms = run.strategy.terms_for(device_id=request.device.device_id, label_counts=counts)
            reason = self.admission.check(decision.batch_size, terms.similarity)
            if reason is not None:
                return self._reject(reason, f"request refused by the controller ({reason})", self.retry_after)
            now = self.clock()
            version = run.version
            if self.version_policy is not None:
                oldest = max(run.floor, run.version - self.version_retention + 1)
                version = min(run.version, max(oldest, self.version_policy(request, run.version)))
            wait = run.strategy.admit(device_id=request.device.device_id, version=version, now=now)
            if wait is not None:
                return self._reject(wait, f"the strategy asks to wait ({wait})", self.retry_after)
            dp = self._dp_terms(request, run, decision.batch_size, terms.extra.get("dp"))
            if isinstance(dp, Refusal):
                return self._reject(dp.reason, dp.detail, PRIVACY_RETRY_AFTER)
            step = dp if dp is not None else terms.extra.get("dp")  # a strategy's terms fix B without DP too
            batch_size = decision.batch_size if step is None else int(step["expected_batch"])
            lease = Lease(
                task_id=secrets.token_hex(12),
                model_id=run.model_id,
                device_id=request.device.device_id,
                device_model=request.device.device_model,
                version=version,
                batch_size=batch_size,
                features=dict(request.features),
                predicted_time_ms=decision.predicted_time_ms,
                predicted_energy=decision.predicted_energy,
                deadline=now + self.lease_seconds,
            )
            charge = None
            if dp is not None and self.privacy is not None:
                self.privacy.bound(lease, run.manifest.num_params, dp)
                charge = self.privacy.charge(lease, dp, local_examples=request.local_examples, at=now)
            self.leases.add(lease)
            self.journal.grant(granted(lease, similarity=terms.similarity, at=now, privacy=charge))
            if now - self._last_expiry > 30:
                self.leases.expire(now)
                self.journal.record(LeasesExpired(before=now))
                self._last_expiry = now
            self.recent.batch_sizes.append(batch_size)
            return TaskGrant(
                task_id=lease.task_id,
                model_id=run.model_id,
                version=version,
                batch_size=batch_size,
                lease_seconds=self.lease_seconds,
                lease_deadline=lease.deadline,
                slo_time_ms=float(self.profiler.time_slo_ms),
                predicted_time_ms=decision.predicted_time_ms,
                similarity=terms.similarity,
                dp=dp if dp is not None else terms.extra.get("dp"),
                slo_energy=self.profiler.energy_slo,
                predicted_energy=decision.predicted_energy,
            )

    def _dp_terms(
        self, request: TaskRequest, run: TrainingRun, batch_size: int, step: dict[str, Any] | None = None
    ) -> dict[str, Any] | Refusal | None:
        """With DP on: the task's DP terms, or why the device may not have one (None: DP is off). A
        strategy's own terms (``step``: AUDP/MAPA's pure-ε steps) replace the Gaussian policy's."""
        if self.privacy is None:
            return None
        if not run.manifest.has_dp_graph:
            return Refusal(
                "dp_unsupported", f"DP is on but model {run.model_id} has no per-example-clipped graph"
            )
        examples = self.privacy.check_examples(request.device.device_id, request.local_examples)
        if step is not None and step.get("mechanism") == LOCAL_SGD:
            return self.privacy.round_terms(request.device.device_id, examples, step)
        if step is not None:
            return self.privacy.pure_terms(request.device.device_id, examples, step)
        return self.privacy.terms(request.device.device_id, examples, batch_size)

    def _reject(self, reason: str, detail: str, retry_after: float) -> Rejection:
        self.recent.rejections[reason] = self.recent.rejections.get(reason, 0) + 1
        self.journal.record(CounterBumped(f"rejected:{reason}"))
        return Rejection(reason, retry_after, detail)

    def submit(self, device: Device, task_id: str, result: TaskResult) -> PushOutcome:
        """Validate a task's gradient, weigh it, maybe step; return once the answer is durable."""
        outcome, ticket = self.submit_nowait(device, task_id, result)
        if ticket is not None:
            ticket.wait()
        return outcome

    def submit_nowait(
        self, device: Device, task_id: str, result: TaskResult
    ) -> tuple[PushOutcome, Ticket | None]:
        """``submit`` without the wait: the outcome may be told to the device once the ticket is released
        (an async caller awaits it instead of blocking a thread). A lease that memory does not hold is
        read from storage first, outside the lock (the async route does it in a thread: ``recall``)."""
        if not self.knows(task_id):
            self.recall(task_id)
        with self._lock:
            self._require_storage()
            lease = self.leases.get(task_id)
            if lease is None:
                raise NotFound(f"no task {task_id!r}")
            if lease.device_id != device.device_id:
                raise Forbidden("this task belongs to another device")
            if lease.status in ANSWERED:
                if lease.digest == result.digest and lease.outcome is not None:
                    outcome, ticket = PushOutcome(**lease.outcome, duplicate=True), self._durable.get(task_id)
                else:
                    raise Conflict("this task was already answered with a different body")
            else:
                outcome, ticket = self._apply(lease, result)
        return outcome, ticket

    def knows(self, task_id: str) -> bool:
        """Whether the lease is in memory (no storage read); a dict lookup, safe without the lock."""
        return self.leases.get(task_id) is not None

    def recall(self, task_id: str) -> None:
        """Bring a stored lease into memory (after a restart): the storage read happens off the lock."""
        record = self.store.lease(task_id)
        if record is not None:
            with self._lock:
                if self.privacy is not None and self.run is not None and self.privacy.charged(task_id):
                    self.privacy.bound(record, self.run.manifest.num_params)
                self.leases.adopt(record)

    def _check_push(self, lease: Lease, result: TaskResult, now: float) -> TrainingRun:
        """The run a push may be applied to, or why not (expired, superseded, finished, invalid)."""
        run = self.run
        if lease.status == "expired" or now > lease.deadline:
            raise Gone("the task's lease expired")
        if run is not None and superseded(run, lease):
            raise Gone(SUPERSEDED)
        if run is None or run.model_id != lease.model_id or run.status == "finished":
            raise TrainingFinished("the task's model is no longer training")
        if self.validates_pushes:
            validate_result(
                run.manifest,
                result,
                max_gradient_norm=lease.norm_limit(self.max_gradient_norm),
                granted_batch_size=lease.batch_size
                if lease.dp_bound is None
                else poisson_ceiling(lease.batch_size),
            )
        return run

    def _apply(
        self, lease: Lease, result: TaskResult, *, queue_id: int | None = None
    ) -> tuple[PushOutcome, Ticket]:
        now = self.clock()
        run = self._check_push(lease, result, now)
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
        self._dirty_profiles.add(lease.device_model)
        stored = None
        if new_params is not None:
            stored = new_params.astype("<f4", copy=False).tobytes()
            run.params, run.version = new_params, version
            self.catalog.remember(run.model_id, version, stored)
        self.leases.answered(lease, result.digest, outcome.to_dict())
        ticket = self.journal.record(
            PushApplied(
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
                queue_id=queue_id,
            )
        )
        self._durable[lease.task_id] = ticket
        while len(self._durable) > 4096:
            self._durable.pop(next(iter(self._durable)))
        if new_params is not None and run.stop_versions is not None and version >= run.stop_versions:
            self._set_status("finished", actor="criterion")
        self.recent.staleness.append(arrival.staleness)
        self.recent.weights.append(weight)
        if lease.predicted_time_ms is not None:
            self.recent.timings.append((lease.predicted_time_ms, result.compute_time_ms))
        return outcome, ticket

    def _checkpoint(self) -> tuple[StateCheckpoint, int]:
        """For the journal's writer: the state after exactly the events appended so far, and their count.

        Events are appended only under this lock, so no push lands between the snapshot and the count
        (the journal's guarantee, see server/core/journal.py)."""
        with self._lock:
            run, now = self.run, self.clock()
            profiles = {f"device:{m}": self.profiler.device_state(m) for m in self._dirty_profiles}
            self._dirty_profiles.clear()
            if run is None:
                return StateCheckpoint(profiles=profiles, at=now), self.journal.appended
            state = StateCheckpoint(run.model_id, run.strategy.state_dict(), profiles, at=now)
            return state, self.journal.appended

    def _journal_failed(self, error: BaseException) -> list[Ticket]:
        """A batch did not commit: memory is ahead of storage. Drop what is queued (returns its tickets:
        they fail too) and refuse work until ``_reload`` has brought back the last durable state."""
        log.error("storage failed (%s): refusing work until the durable state is reloaded", error)
        with self._lock:
            self.degraded = str(error) or type(error).__name__
            return self.journal.discard()

    def _reload(self) -> list[Ticket]:
        """Reload the last durable state (the journal calls it until it succeeds); returns the tickets of
        whatever was queued meanwhile. The ping runs off the lock: a hung database holds up no request."""
        self.store.ping()
        with self._lock:
            dropped = self.journal.discard()
            self.leases = LeaseBook()
            self._durable.clear()
            self._dirty_profiles.clear()
            self.start()
            self.degraded = None
        log.warning("storage is back: the coordinator reloaded its durable state")
        return dropped

    def close(self) -> None:
        """Write what is queued and stop the journal's writer."""
        self.journal.close()

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            run = self.run
            return None if run is None else Snapshot(run.model_id, run.version, run.params.copy())
