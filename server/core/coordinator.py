"""The coordinator core: hands out learning tasks and applies returned gradients. No HTTP here.

One model trains at a time. A push is applied in memory under one lock, in order, and acknowledged
only once the journal (server/core/journal.py) has committed it: pushes arriving together share one
transaction (group commit), so what a device was told survives a crash without one fsync per push.
The core depends on two ports (server/core/ports.py): a ``Profiler`` and a ``Store``; every write is
a domain event (server/core/events.py) handed to the journal or, when nothing waits on push order
(a new model, an enrollment), to the store directly. The API, the simulator and the tests all drive
this class; the clock is injected (wall time in server/, virtual time in sim/, where
``durable=False`` writes in batches and never waits).

What differs between the scale-out roles (docs/scale-out.md) is injected, not subclassed: which checks
a push must pass and where an accepted one goes (server/core/pushes.py: ``PushCheck``, ``PushSink``),
and whether the training state is this process's own or followed from storage
(server/core/following.py: ``Versions``). server/compose.py assembles them per FLEET_ROLE.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fleet_protocol import Bundle
from server.core.admission import AdmissionController
from server.core.attestation import Attestation
from server.core.catalog import Catalog, ModelInfo
from server.core.devices import DeviceRegistry
from server.core.enrollment import KeyUse
from server.core.errors import (
    Conflict,
    CoordinatorError,
    Forbidden,
    Gone,
    NotFound,
    TrainingFinished,
)
from server.core.events import Event, PushRefused, StateCheckpoint
from server.core.figures import RecentFigures
from server.core.following import OwnState, Versions
from server.core.granting import Granting
from server.core.health import Health, HealthPolicy, assess, device_fault
from server.core.health_signals import gather
from server.core.journal import Journal, Ticket
from server.core.leases import Lease, LeaseBook
from server.core.ports import Profiler, Store, Strategy
from server.core.privacy import PrivacyLedger, PrivacyPolicy
from server.core.profiles import ProfilerView
from server.core.promotion import SUPERSEDED, floor_of, superseded
from server.core.pushes import DEVICE_CHECKS, ApplyNow, Push, PushCheck, PushSink
from server.core.run import TrainingRun
from server.core.steering import Steering
from server.core.types import Device, PushOutcome, Snapshot, TaskRequest, TaskResult
from server.core.validation import norm_bound

log = logging.getLogger("fleet.server")
ANSWERED = ("applied", "queued", "dropped")  # a task's statuses once its push was accepted


class Coordinator(Granting, Steering):
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
        checks: Sequence[PushCheck] = DEVICE_CHECKS,
        sink: PushSink | None = None,
        versions: Versions | None = None,
        recall_wait_s: float = 0.0,
        health: HealthPolicy | None = None,
        attestation: Attestation | None = None,
        enroll_quota: int | None = None,
        model_rate: bool = False,
        model_cap: bool = False,
    ) -> None:
        """``model_rate``: the strategy steps at the model's own rate (its manifest's ``learning_rate``)
        where it has one; the composition root sets it when the settings leave the rate unset.
        ``model_cap``: its steps are capped at the model's own ``max_step`` where it has one, unless the
        strategy has a cap; the composition root sets it for the default strategy, whatever its rate.
        ``checks``: what a push must pass besides its lease's expiry and the run's (the aggregator:
        ``TRUSTED``). ``sink``: where an accepted push goes (None: ``ApplyNow``, over this coordinator's
        strategy, profiler and catalog; an API worker: ``Enqueue``). ``versions``: ``OwnState`` (None)
        or ``FollowStorage`` (an API worker). ``recall_wait_s``: how long a push for a task this process
        does not know looks again for its lease (another API worker may commit its grant a moment after
        the device pushed here). ``health``: the thresholds of ``health()``. ``attestation`` and
        ``enroll_quota``: what an enrollment through a key must pass (``DeviceRegistry``; by default no
        attestation and no quota)."""
        self.store = store
        self.health_policy = health or HealthPolicy()
        self.profiler = profiler
        self.strategy_factory = strategy_factory
        self.model_rate, self.model_cap = model_rate, model_cap
        self.admission = admission or AdmissionController()
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.max_gradient_norm = norm_bound(max_gradient_norm)
        self.version_retention = version_retention
        self.retry_after = retry_after
        # which version a task is computed on (default: the newest); the experiments' staleness
        # controller (sim/staleness.py) hands out older retained versions to impose τ
        self.version_policy = version_policy
        self.privacy_policy = privacy
        self.privacy: PrivacyLedger | None = None  # loaded from storage in start() when DP is on
        self.devices = DeviceRegistry(
            store=store, clock=clock, attestation=attestation, default_quota=enroll_quota
        )
        self.catalog = Catalog(store=store, clock=clock)
        self.profiles = ProfilerView(profiler, store)
        self.run: TrainingRun | None = None
        self.recent = RecentFigures()
        self._lock = threading.RLock()
        self._promoting = threading.RLock()  # one promotion or rollback at a time (taken before _lock)
        self._last_expiry = 0.0
        self.leases = LeaseBook()
        self._durable: dict[str, Ticket] = {}  # recent answers' tickets: a retry waits for durability too
        self._charged: Ticket | None = None  # the DP grant being made: its charge's ticket (under the lock)
        self._dirty_profiles: set[str] = set()
        self.checks = tuple(checks)
        self.sink: PushSink = sink or ApplyNow(
            profiler=profiler, catalog=self.catalog, recent=self.recent, touched=self._dirty_profiles
        )
        self.versions: Versions = versions or OwnState()
        self.recall_wait_s = recall_wait_s
        self._following = threading.Lock()  # one ``follow`` at a time
        # why storage cannot be used (a commit failed), until the journal has reloaded the durable state
        self.degraded: str | None = None
        self.journal = Journal(
            store=store,
            checkpoint=self._checkpoint,
            on_failure=self._journal_failed,
            reload=self._reload,
            durable=durable,
            clock=clock,
        )

    # -- start-up and models -------------------------------------------------------------------
    def start(self) -> None:
        """Load the active model, strategy state and profiler state from storage."""
        for key, state in self.store.profiler_states().items():
            self._load_profile(key, state)
        self.recent.rejections = self.store.counters("rejected:")
        self.recent.declines = self.store.counters("declined:")
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
        manifest = self.catalog.manifest(model_id)
        strategy = self.strategy_for(manifest)
        state = self.store.strategy_state(model_id)
        if state is not None:
            strategy.load_state_dict(state)
        params = self.catalog.params(model_id, row.current_version).astype(np.float32)
        self.run = TrainingRun(
            model_id=model_id,
            manifest=manifest,
            params=params,
            version=row.current_version,
            status=row.status,
            strategy=strategy,
            stop_accuracy=row.stop_accuracy,
            stop_versions=row.stop_versions,
            floor=floor_of(self.store, model_id),
        )
        self.recent.training_since = self.clock()
        log.info("training %s from version %d with %r", model_id, row.current_version, strategy)

    def add_model(self, bundle: Bundle, *, name: str | None = None, actor: str = "admin") -> ModelInfo:
        with self._lock:
            info = self.catalog.add(bundle, name=name, actor=actor)
            self._activate(info.model_id)
            return info

    def enroll(
        self,
        device_model: str,
        install_secret: str | None = None,
        *,
        key: KeyUse | None = None,
        attestation: str | None = None,
    ) -> tuple[Device, str]:
        """A device identity and its bearer token (shown once, stored hashed); an install enrolling again
        with its secret keeps its id; with ``key``, attested and within the key's quota
        (``DeviceRegistry.enroll``)."""
        device, token = self.devices.enroll(device_model, install_secret, key=key, attestation=attestation)
        with self._lock:
            if self.run is not None:
                self.run.strategy.on_register(device.device_id)
        return device, token

    # -- tasks ---------------------------------------------------------------------------------
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
            elif lease.digest not in (None, result.digest):  # a DP push was refused: one body per task
                raise Conflict("this DP task's push was refused; a different body for it is refused too")
            else:
                outcome, ticket = self._apply(lease, result)
        return outcome, ticket

    def knows(self, task_id: str) -> bool:
        """Whether the lease is in memory (no storage read); a dict lookup, safe without the lock."""
        return self.leases.get(task_id) is not None

    def recall(self, task_id: str) -> None:
        """Bring a stored lease into memory (after a restart): the storage read happens off the lock.
        Looks again for up to ``recall_wait_s`` (an API worker: another worker's journal may commit the
        grant a moment after its device already pushed here)."""
        deadline = time.monotonic() + self.recall_wait_s
        while (record := self.store.lease(task_id)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if record is not None:
            with self._lock:
                if self.privacy is not None and self.run is not None and self.privacy.charged(task_id):
                    self.privacy.bound(record, self.run.manifest.num_params)
                self.leases.adopt(record)

    def _check_push(self, lease: Lease, result: TaskResult, now: float, queue_id: int | None) -> Push:
        """The push, if its lease is live and the running model may take it (else Gone: expired,
        superseded; TrainingFinished), and it passes the injected checks (``self.checks``)."""
        run = self.run
        if lease.status == "expired" or now > lease.deadline:
            raise Gone("the task's lease expired")
        if run is not None and superseded(run, lease):
            raise Gone(SUPERSEDED)
        if run is None or run.model_id != lease.model_id or run.status == "finished":
            raise TrainingFinished("the task's model is no longer training")
        push = Push(run, lease, result, now, self.max_gradient_norm, queue_id)
        for check in self.checks:
            check.check(push)
        return push

    def _apply(
        self, lease: Lease, result: TaskResult, *, queue_id: int | None = None
    ) -> tuple[PushOutcome, Ticket]:
        """Check a push, hand it to the sink, journal the sink's event: under the lock. A refused DP push
        leaves its digest on the open lease (and in storage): the server has seen that body, so another
        one for the task would be a second release for one charge (finding 8)."""
        try:
            push = self._check_push(lease, result, self.clock(), queue_id)
        except CoordinatorError as exc:
            if device_fault(exc):
                self.recent.ended(lease.device_id, False, self.clock())
            if lease.dp_bound is not None and lease.digest is None:
                lease.digest = result.digest
                self.journal.record(PushRefused(lease.task_id, result.digest, self.clock()))
            raise
        outcome, event = self.sink.accept(push)
        self.leases.answered(lease, result.digest, outcome.to_dict())
        ticket = self.journal.record(event)
        self._durable[lease.task_id] = ticket
        while len(self._durable) > 4096:
            self._durable.pop(next(iter(self._durable)))
        run = push.run
        if outcome.applied and run.stop_versions is not None and outcome.version >= run.stop_versions:
            self._set_status("finished", actor="criterion")
        self.recent.staleness.append(outcome.staleness)
        self.recent.ended(lease.device_id, True, push.now)
        return outcome, ticket

    def take(
        self,
        answers: Sequence[tuple[Lease, TaskResult, int]],
        refused: Callable[[Lease, int, CoordinatorError], Event],
    ) -> Ticket | None:
        """Take the aggregator's queued (lease, result, queue id) answers in order, under one hold of the
        lock, through the same checks and sink; one the run can no longer take is journaled as ``refused``'s
        event instead. Returns the last one's ticket (released once the batch is durable)."""
        ticket = None
        with self._lock:
            for lease, result, queue_id in answers:
                try:
                    _, ticket = self._apply(lease, result, queue_id=queue_id)
                except CoordinatorError as exc:
                    ticket = self.journal.record(refused(lease, queue_id, exc))
        return ticket

    def follow(self) -> None:
        """Catch up with what another process wrote (``versions``: an API worker follows the aggregator):
        the active model, its newest committed version, the strategy's and profiler's state. Storage is
        read off the lock. A no-op for a coordinator that owns its state."""
        with self._following:
            head = self.versions.read(self.run)
            if head is None:
                return
            with self._lock:
                run = self.run
                if run is None or run.model_id != head.model_id:
                    self._activate(head.model_id)
                    return
                if head.params is not None and head.version > run.version:
                    self.catalog.remember(run.model_id, head.version, head.params)
                    run.params = np.frombuffer(head.params, dtype="<f4").astype(np.float32)
                    run.version = head.version
                run.status = head.status
                if head.strategy_state is not None:
                    run.strategy.load_state_dict(head.strategy_state)
                for key, state in head.profiles.items():
                    self._load_profile(key, state)

    def _checkpoint(self) -> tuple[StateCheckpoint, int]:
        """For the journal's writer: the state after exactly the events appended so far, and their count.

        Events are appended only under this lock, so no push lands between the snapshot and the count
        (the journal's guarantee, see server/core/journal.py)."""
        with self._lock:
            run, now = self.run, self.clock()
            if not self.versions.owns_state:  # another process writes it: a checkpoint would overwrite it
                return StateCheckpoint(at=now), self.journal.appended
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

    def health(self) -> Health:
        """The health as of now: "ok", "degraded" or "down", and why (server/core/health.py)."""
        return assess(gather(self), self.health_policy)

    def close(self) -> None:
        """Write what is queued and stop the journal's writer."""
        self.journal.close()

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            run = self.run
            if run is None:
                return None
            served = run.served()
            return Snapshot(run.model_id, run.version, served.copy(), averaged=served is not run.params)
