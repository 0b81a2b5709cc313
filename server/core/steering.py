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

import numpy as np

from fleet_protocol import Manifest
from server.core.admission import AdmissionController
from server.core.catalog import Catalog
from server.core.devices import DeviceRegistry
from server.core.errors import Conflict, NotFound, StorageUnavailable
from server.core.events import (
    EvaluationRecorded,
    StateCheckpoint,
    StatusChanged,
    StopCriterionSet,
    VersionNoted,
)
from server.core.figures import RecentFigures
from server.core.journal import Journal, Ticket
from server.core.lineage import clean_note, rollback_target
from server.core.ports import Store, Strategy
from server.core.promotion import candidate, promoted
from server.core.run import TrainingRun, carried_over
from server.core.validation import norm_bound

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
    model_rate: bool
    model_cap: bool
    admission: AdmissionController
    lease_seconds: float
    max_gradient_norm: float
    version_retention: int
    recent: RecentFigures
    _lock: threading.RLock
    _promoting: threading.RLock
    degraded: str | None
    # set by the composition root when there is a held-out set (server/compose.py): (model, params) ->
    # (accuracy, loss), so that a promoted or restored head is evaluated at once
    evaluate_params: Callable[[str, np.ndarray], tuple[float, float]] | None = None

    def _require_storage(self) -> None:
        """Refuse work while storage is unusable (the coordinator's push path asks the same)."""
        if self.degraded is not None:
            raise StorageUnavailable(f"storage is unavailable: {self.degraded}")

    # -- lifecycle -----------------------------------------------------------------------------
    def _set_status(self, status: str, *, actor: str = "admin") -> Ticket:
        run = self._require_run()
        previous, run.status = run.status, status
        if status == "training":  # resumed: the health check counts silence from now (server/core/health.py)
            self.recent.training_since = self.clock()
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
    def promote(self, model_id: str, version: int, *, actor: str, note: str | None = None) -> tuple[str, int]:
        """Make a retained version the head that trains, as a new version (server/core/promotion.py);
        returns (model, new version) once durable. NotFound if unknown, Gone past retention,
        InvalidInput for a bad note (server/core/lineage.py)."""
        return self._change_head(model_id, version, actor=actor, kind="promotion", note=note)

    def rollback(self, *, actor: str, note: str | None = None) -> tuple[str, int]:
        """Undo the newest promotion no rollback undid yet: the head it replaced comes back as a new
        version of kind "rollback" (an undo stack, server/core/lineage.py: a second rollback never
        re-applies the first). Conflict if there is nothing to undo."""
        with self._promoting:
            self._settle()
            target = rollback_target(self.store.head_changes())
            if target is None:
                raise Conflict("nothing to roll back")
            model_id, version = target.previous_model_id, target.previous_version
            return self._change_head(model_id, version, actor=actor, kind="rollback", note=note)

    def _change_head(
        self, model_id: str, version: int, *, actor: str, kind: str, note: str | None
    ) -> tuple[str, int]:
        text = clean_note(note)
        with self._promoting:
            self._settle()
            chosen = candidate(self.catalog, model_id, version, retention=self.version_retention)
            with self._lock:
                self._require_storage()
                strategy = self.strategy_for(chosen.manifest)
                at = self.clock()
                run, event = promoted(
                    self._require_run(), chosen, strategy, actor=actor, at=at, kind=kind, note=text
                )
                self.run = run
                self.catalog.remember(run.model_id, run.version, chosen.params)
                ticket = self.journal.record(event)
            ticket.wait()  # pushes on the new head may step ``run`` meanwhile: report the event's version
            log.info("%s: %s %s@%d as version %d", actor, kind, model_id, version, event.version)
            self._evaluate_new_head(event.model_id, event.version, version, chosen.params)
            return event.model_id, event.version

    def _evaluate_new_head(self, model_id: str, version: int, source: int, params: bytes) -> None:
        """The new head's accuracy at once, so it never shows none: its parameters are ``source``'s, so
        that version's evaluation if it has one, else the evaluator's (none without a held-out set)."""
        known = [e for e in self.store.evaluations(model_id) if e.version == source]
        if known:
            accuracy, loss = known[-1].accuracy, known[-1].loss
        elif self.evaluate_params is not None:
            try:
                accuracy, loss = self.evaluate_params(model_id, np.frombuffer(params, dtype="<f4"))
            except Exception:  # the head changed: a failed evaluation only leaves it for the loop
                log.exception("evaluation of %s v%d failed", model_id, version)
                return
        else:
            return
        # no stop rule: the operator just chose to train from these parameters
        self.record_evaluation(model_id, version, accuracy, loss, stop_rule=False)

    def annotate(self, model_id: str, version: int, note: str | None, *, actor: str) -> None:
        """Set (or clear, with an empty note) a retained version's note. NotFound for an unknown model
        or a version not retained, InvalidInput for a bad note."""
        text = clean_note(note)
        self._settle()  # the version may still be queued in the journal
        if all(r.version != version for r in self.catalog.versions(model_id)):
            raise NotFound(f"model {model_id} has no retained version {version}")
        with self._lock:
            ticket = self.journal.record(VersionNoted(model_id, version, text, actor, self.clock()))
        ticket.wait()

    def _settle(self) -> None:
        """Before reading heads and promotions back from storage: refuse while it is unusable, then write
        what is queued (pushes of a model just replaced, or a simulator's lagging journal)."""
        self._require_storage()
        self.journal.flush()

    def revoke_device(self, device_id: str, *, actor: str) -> None:
        """The device's token stops working now; its leases stay (its pushes fail authentication).
        Enrollment keys are the registry's: ``self.devices.create_enrollment_key`` and the rest."""
        self.devices.revoke(device_id, actor=actor)

    def strategy_for(self, manifest: Manifest) -> Strategy:
        """A new strategy for training ``manifest``'s model: at the model's own rate under ``model_rate``, and
        with its own step cap under ``model_cap`` unless the settings set one."""
        strategy = self.strategy_factory()
        if self.model_rate and manifest.learning_rate is not None:
            strategy.learning_rate = manifest.learning_rate
        if self.model_cap and manifest.max_step is not None and strategy.max_step is None:
            strategy.max_step = manifest.max_step
        return strategy

    def reconfigure(
        self,
        *,
        strategy_factory: Callable[[], Strategy] | None = None,
        model_rate: bool | None = None,
        model_cap: bool | None = None,
        lease_seconds: float | None = None,
        max_gradient_norm: float | None = None,
        admission: AdmissionController | None = None,
    ) -> None:
        """Change settings while training: a new strategy keeps the running one's state when it is the
        same kind (server/core/run.py ``carried_over``), and later activations use its factory."""
        with self._lock:
            if model_rate is not None:
                self.model_rate = model_rate
            if model_cap is not None:
                self.model_cap = model_cap
            if strategy_factory is not None:
                self.strategy_factory = strategy_factory
                run = self.run
                if run is not None:
                    run.strategy = carried_over(run.strategy, self.strategy_for(run.manifest))
                    state = StateCheckpoint(run.model_id, run.strategy.state_dict(), at=self.clock())
                    self.journal.record(state)  # a restart loads the new strategy's state
            if lease_seconds is not None:
                self.lease_seconds = lease_seconds
            if max_gradient_norm is not None:
                self.max_gradient_norm = norm_bound(max_gradient_norm)
            if admission is not None:
                self.admission = admission

    # -- evaluations, the accuracy stop rule and the figures ------------------------------------
    def record_evaluation(
        self,
        model_id: str,
        version: int,
        accuracy: float,
        loss: float,
        *,
        stop_rule: bool = True,
        reference: float | None = None,
        served: np.ndarray | None = None,
    ) -> None:
        """Store an evaluation (through the journal, in order with the pushes) and apply the stop rule;
        ``served``: the parameters scored, when the strategy serves an average, kept with the version."""
        data = None if served is None else np.asarray(served, dtype="<f4").tobytes()
        with self._lock:
            evaluation = EvaluationRecorded(model_id, version, accuracy, loss, self.clock(), reference, data)
            tickets = [self.journal.record(evaluation)]
            run = self.run
            if run is not None and run.model_id == model_id:
                run.latest_accuracy = accuracy
                stop = run.stop_accuracy if stop_rule else None
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
