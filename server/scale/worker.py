"""An API worker's coordinator: grants tasks and validates pushes like the single process, but queues
each valid push for the aggregator instead of applying it, and follows the versions it publishes.

A push is answered once its queue row is committed (the journal's group commit, as for an applied
push), with ``queued=True``: its weight and the version it makes are the aggregator's to decide."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from server.core.coordinator import Coordinator
from server.core.events import PushQueued, StateCheckpoint
from server.core.journal import Ticket
from server.core.leases import Lease
from server.core.types import PushOutcome, TaskResult

log = logging.getLogger("fleet.server")


def queued_meta(result: TaskResult) -> dict[str, Any]:
    """What the aggregator needs of a push besides its gradient (the lease it reads from the task row)."""
    return {
        "label_counts": [int(c) for c in result.label_counts],
        "loss": float(result.loss),
        "compute_time_ms": float(result.compute_time_ms),
        "energy": None if result.energy is None else float(result.energy),
        "batch_size": int(result.batch_size),
    }


class QueueingCoordinator(Coordinator):
    """``Coordinator`` with ``_apply`` replaced by "validate and queue"; it never writes training state."""

    state_refresh_s = 1.0  # the strategy's and profiler's state are re-read at most this often
    recall_wait_s = 1.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._following = threading.Lock()
        self._state_read_at = 0.0

    def _apply(
        self, lease: Lease, result: TaskResult, *, queue_id: int | None = None
    ) -> tuple[PushOutcome, Ticket]:
        now = self.clock()
        run = self._check_push(lease, result, now)
        outcome = PushOutcome(
            lease.task_id, run.version - lease.version, 0.0, run.version, applied=False, queued=True
        )
        self.leases.answered(lease, result.digest, outcome.to_dict())
        gradient = np.ascontiguousarray(result.gradient, dtype="<f4").tobytes()
        event = PushQueued(
            lease.task_id, result.digest, outcome.to_dict(), queued_meta(result), gradient, now
        )
        ticket = self.journal.record(event)
        self._durable[lease.task_id] = ticket
        while len(self._durable) > 4096:
            self._durable.pop(next(iter(self._durable)))
        self.recent.staleness.append(outcome.staleness)
        return outcome, ticket

    def recall(self, task_id: str) -> None:
        """A lease this worker did not grant: another worker's journal may commit it a moment after its
        device already pushed here, so look again for up to ``recall_wait_s`` before a 404."""
        deadline = time.monotonic() + self.recall_wait_s
        while True:
            super().recall(task_id)
            if self.knows(task_id) or time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def _checkpoint(self) -> tuple[StateCheckpoint, int]:
        """Workers own no training state: their batches carry none (the aggregator's would be overwritten)."""
        with self._lock:
            return StateCheckpoint(at=self.clock()), self.journal.appended

    def follow(self) -> None:
        """Catch up with storage: the active model, its newest committed version, and (at most once per
        ``state_refresh_s``) the strategy's and profiler's state that grants are computed from."""
        with self._following:
            head = self.store.active_head()  # type: ignore[attr-defined]
            if head is None:
                return
            model_id, version, status = head
            run = self.run
            if run is None or run.model_id != model_id:
                with self._lock:
                    self._activate(model_id)
                return
            params = None
            if version > run.version:
                data = self.catalog.params_bytes(model_id, version)
                params = np.frombuffer(data, dtype="<f4").astype(np.float32)
            now = time.monotonic()
            refresh = now - self._state_read_at >= self.state_refresh_s
            strategy = self.store.strategy_state(model_id) if refresh else None
            profiles = self.store.profiler_states() if refresh else {}
            with self._lock:
                if params is not None and version > run.version:
                    run.params, run.version = params, version
                run.status = status
                if strategy is not None:
                    run.strategy.load_state_dict(strategy)
                for key, state in profiles.items():
                    self._load_profile(key, state)
            if refresh:
                self._state_read_at = now
