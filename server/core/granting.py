"""The task path's first half: a device asks, the profiler sizes its batch, the strategy and the controller
may say wait, the privacy ledger grants DP terms or refuses, and a lease is journalled (a DP grant's charge
durable before the device is told). A mixin of ``Coordinator`` (server/core/coordinator.py), kept apart so
each file reads on its own; it uses the coordinator's lock, journal and ports.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any

from server.core.admission import AdmissionController
from server.core.errors import Conflict, Forbidden, NotFound
from server.core.events import CounterBumped, LeasesExpired
from server.core.figures import RecentFigures
from server.core.journal import Journal, Ticket
from server.core.leases import Lease, LeaseBook
from server.core.ports import Profiler
from server.core.privacy import PRIVACY_RETRY_AFTER, PrivacyLedger, Refusal
from server.core.run import TrainingRun, granted
from server.core.types import Device, Rejection, TaskGrant, TaskRequest
from server.core.validation import request_counts, validate_features


class Granting:
    """``request_task``: a grant (a lease, with DP terms when DP is on) or a rejection with its reason."""

    # provided by Coordinator
    run: TrainingRun | None
    profiler: Profiler
    admission: AdmissionController
    privacy: PrivacyLedger | None
    leases: LeaseBook
    journal: Journal
    recent: RecentFigures
    clock: Callable[[], float]
    lease_seconds: float
    retry_after: float
    version_retention: int
    version_policy: Callable[[TaskRequest, int], int] | None
    degraded: str | None
    _lock: threading.RLock
    _charged: Ticket | None
    _last_expiry: float

    def request_task(self, request: TaskRequest) -> TaskGrant | Rejection:
        """``request_task_nowait``, returning once a DP grant's charge is durable."""
        answer, ticket = self.request_task_nowait(request)
        if ticket is not None:
            ticket.wait()
        return answer

    def request_task_nowait(self, request: TaskRequest) -> tuple[TaskGrant | Rejection, Ticket | None]:
        """The answer, and for a DP grant the ticket released once its charge is committed: the device may
        be told only then (finding 8). Other grants ride along with the next commit (no ticket): one lost
        in a crash only makes its device ask again. A failed commit reloads the durable state, which drops
        the charge and the lease the device was never told of."""
        with self._lock:
            self._charged = None
            answer = self._lease(request)
            return answer, self._charged

    def _lease(self, request: TaskRequest) -> TaskGrant | Rejection:
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
            counts = request_counts(request, run.manifest.num_classes, dp=self.privacy is not None)
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
            self.leases.add(lease)
            self._journal_grant(
                lease, terms.similarity, now, dp, request.local_examples, run.manifest.num_params
            )
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

    def decline(self, device: Device, task_id: str, *, reason: str) -> bool:
        """The device gives a granted task back unrun: terms it cannot run (issue 29). Its lease ends now,
        so a late push for it is refused, and ``declined:<reason>`` is counted (figures, storage); a DP
        task stays charged (a charge is made at grant). Returns ``RecentFigures.declined``'s answer (the
        API audits the first of a device's declines for a reason). NotFound, Forbidden or Conflict."""
        with self._lock:
            lease = self.leases.get(task_id)
            if lease is None:
                raise NotFound(f"no task {task_id!r}")
            if lease.device_id != device.device_id:
                raise Forbidden("this task belongs to another device")
            if lease.status != "open" or lease.digest is not None:
                raise Conflict(f"task {task_id} was already answered")
            now = self.clock()
            lease.deadline = min(lease.deadline, now)
            self.journal.record(CounterBumped(f"declined:{reason}"))
            return self.recent.declined(device.device_id, reason, now)

    def _dp_terms(
        self, request: TaskRequest, run: TrainingRun, batch_size: int, step: dict[str, Any] | None = None
    ) -> dict[str, Any] | Refusal | None:
        """With DP on: the task's DP terms, or why the device may not have one (None: DP is off)."""
        if self.privacy is None:
            return None
        if not run.manifest.has_dp_graph:
            return Refusal(
                "dp_unsupported", f"DP is on but model {run.model_id} has no per-example-clipped graph"
            )
        return self.privacy.grant_terms(request.device.device_id, request.local_examples, batch_size, step)

    def _journal_grant(
        self,
        lease: Lease,
        similarity: float | None,
        at: float,
        dp: dict[str, Any] | None,
        examples: Any,
        d: int,
    ) -> None:
        """Journal a grant. A DP one is bounded, charged, and its ticket kept: the charge must be durable
        before the grant is answered (``request_task_nowait``)."""
        if dp is None or self.privacy is None:
            self.journal.grant(granted(lease, similarity=similarity, at=at))
            return
        self.privacy.bound(lease, d, dp)
        charge = self.privacy.charge(lease, dp, local_examples=examples, at=at)
        self._charged = self.journal.record(granted(lease, similarity=similarity, at=at, privacy=charge))

    def _reject(self, reason: str, detail: str, retry_after: float) -> Rejection:
        self.recent.rejections[reason] = self.recent.rejections.get(reason, 0) + 1
        self.journal.record(CounterBumped(f"rejected:{reason}"))
        return Rejection(reason, retry_after, detail)
