"""The operator's controls over a running coordinator: pause, resume, stop rules, promotion and
rollback, device revocation, live settings; and what the operator reads (evaluations, figures).
A mixin of ``Coordinator`` (server/core/coordinator.py), kept apart so the task path there reads on its
own; it uses the coordinator's lock, journal and ports.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from server.core.admission import AdmissionController
from server.core.catalog import Catalog
from server.core.devices import DeviceRegistry
from server.core.errors import Conflict, NotFound, StorageUnavailable
from server.core.events import EvaluationRecorded, StateCheckpoint, StatusChanged, StopCriterionSet
from server.core.figures import RecentFigures
from server.core.journal import Journal, Ticket
from server.core.ports import Store, Strategy
from server.core.promotion import candidate, promoted
from server.core.run import TrainingRun, carried_over

log = logging.getLogger("fleet.server")


class Steering:
    """Administrative operations; every change goes through the journal, in order with the pushes."""

    # provided by Coordinator
    run: TrainingRun | None
    store: Store
    catalog: Catalog
    devices: DeviceRegistry
    journal: Journal
    clock: Callable[[], float]
    strategy_factory: Callable[[], Strategy]
    admission: AdmissionController
    lease_seconds: float
    max_gradient_norm: float
    version_retention: int
    recent: RecentFigures
    _lock: threading.RLock
    _promoting: threading.RLock
    degraded: str | None

    def _require_storage(self) -> None:
        """Refuse work while storage is unusable (the coordinator's push path asks the same)."""
        if self.degraded is not None:
            raise StorageUnavailable(f"storage is unavailable: {self.degraded}")

    # -- lifecycle -----------------------------------------------------------------------------
    def _set_status(self, status: str, *, actor: str = "admin") -> Ticket:
        run = self._require_run()
        previous, run.status = run.status, status
        log.info("model %s is now %s at version %d", run.model_id, status, run.version)
        event = StatusChanged(run.model_id, status, run.version, actor, self.clock(), previous=previous)
        return self.journal.record(event)

    def _require_run(self) -> TrainingRun:
        if self.run is None:
            raise NotFound("no model is training")
        return self.run

    def pause(self, *, actor: str = "admin") -> None:
        with self._lock:
            running = self._require_run().status == "training"
            ticket = self._set_status("paused", actor=actor) if running else None
        if ticket is not None:
            ticket.wait()

    def resume(self, *, actor: str = "admin") -> None:
        with self._lock:
            paused = self._require_run().status == "paused"
            ticket = self._set_status("training", actor=actor) if paused else None
        if ticket is not None:
            ticket.wait()

    def set_stop(
        self, *, target_accuracy: float | None, max_versions: int | None, actor: str = "admin"
    ) -> None:
        """Finish training once an evaluation reaches ``target_accuracy`` or ``max_versions`` is reached."""
        with self._lock:
            run = self._require_run()
            run.stop_accuracy, run.stop_versions = target_accuracy, max_versions
            event = StopCriterionSet(run.model_id, target_accuracy, max_versions, actor, self.clock())
            tickets = [self.journal.record(event)]
            if max_versions is not None and run.version >= max_versions and run.status != "finished":
                tickets.append(self._set_status("finished", actor="criterion"))
        for ticket in tickets:
            ticket.wait()

    # -- promotion, access, live settings -------------------------------------------------------
    def promote(self, model_id: str, version: int, *, actor: str) -> tuple[str, int]:
        """Make a retained version the head that trains, as a new version (server/core/promotion.py);
        returns (model, new version) once durable. NotFound if unknown, Gone past retention."""
        with self._promoting:
            self._settle()
            chosen = candidate(self.catalog, model_id, version, retention=self.version_retention)
            with self._lock:
                self._require_storage()
                strategy = self.strategy_factory()
                run, event = promoted(self._require_run(), chosen, strategy, actor=actor, at=self.clock())
                self.run = run
                self.catalog.remember(run.model_id, run.version, chosen.params)
                ticket = self.journal.record(event)
            ticket.wait()  # pushes on the new head may step ``run`` meanwhile: report the event's version
            log.info("%s promoted %s@%d as version %d", actor, model_id, version, event.version)
            return event.model_id, event.version

    def rollback(self, *, actor: str) -> tuple[str, int]:
        """Undo the last promotion by promoting the head it replaced, as a new version (itself a
        promotion: a second rollback redoes the first one). Conflict if nothing was promoted."""
        with self._promoting:
            self._settle()
            last = self.store.last_promotion()
            if last is None:
                raise Conflict("nothing to roll back")
            return self.promote(last.previous_model_id, last.previous_version, actor=actor)

    def _settle(self) -> None:
        """Before reading heads and promotions back from storage: refuse while it is unusable, then write
        what is queued (pushes of a model just replaced, or a simulator's lagging journal)."""
        self._require_storage()
        self.journal.flush()

    def revoke_device(self, device_id: str, *, actor: str) -> None:
        """The device's token stops working now; its leases stay (its pushes fail authentication).
        Enrollment keys are the registry's: ``self.devices.create_enrollment_key`` and the rest."""
        self.devices.revoke(device_id, actor=actor)

    def reconfigure(
        self,
        *,
        strategy_factory: Callable[[], Strategy] | None = None,
        lease_seconds: float | None = None,
        max_gradient_norm: float | None = None,
        admission: AdmissionController | None = None,
    ) -> None:
        """Change settings while training: a new strategy keeps the running one's state when it is the
        same kind (server/core/run.py ``carried_over``), and later activations use its factory."""
        with self._lock:
            if strategy_factory is not None:
                self.strategy_factory = strategy_factory
                run = self.run
                if run is not None:
                    run.strategy = carried_over(run.strategy, strategy_factory())
                    state = StateCheckpoint(run.model_id, run.strategy.state_dict(), at=self.clock())
                    self.journal.record(state)  # a restart loads the new strategy's state
            if lease_seconds is not None:
                self.lease_seconds = lease_seconds
            if max_gradient_norm is not None:
                self.max_gradient_norm = max_gradient_norm
            if admission is not None:
                self.admission = admission

    # -- evaluations, the accuracy stop rule and the figures ------------------------------------
    def record_evaluation(self, model_id: str, version: int, accuracy: float, loss: float) -> None:
        """Store an evaluation (through the journal, in order with the pushes) and apply the stop rule."""
        with self._lock:
            evaluation = EvaluationRecorded(model_id, version, accuracy, loss, self.clock())
            tickets = [self.journal.record(evaluation)]
            run = self.run
            if run is not None and run.model_id == model_id:
                run.latest_accuracy = accuracy
                stop = run.stop_accuracy
                if stop is not None and accuracy >= stop and run.status != "finished":
                    tickets.append(self._set_status("finished", actor="criterion"))
        for ticket in tickets:
            ticket.wait()

    def evaluations(self, model_id: str) -> list[dict[str, float]]:
        return [asdict(r) for r in self.store.evaluations(model_id)]

    def stats(self) -> dict[str, Any]:
        """The figures of the demo's summary and the console."""
        run = self.run
        latest = None if run is None else self.store.latest_evaluation(run.model_id)
        with self._lock:
            return {
                "model_id": run.model_id if run else None,
                "status": run.status if run else "no_model",
                "version": run.version if run else 0,
                "accuracy": latest.accuracy if latest else None,
                "evaluated_version": latest.version if latest else None,
                "devices": self.devices.count(),
                "strategy": run.strategy.describe() if run else None,
                **self.recent.summary(),
            }
