"""Task leases in memory, so a push needs no database read; the database is the fallback after a restart."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from server.core.types import TaskResult
from server.store import repository as repo


@dataclass
class Lease:
    """A granted task and, once answered, the body digest and the answer it got."""

    task_id: str
    model_id: str
    device_id: str
    device_model: str
    version: int
    batch_size: int
    features: dict[str, Any]
    predicted_time_ms: float | None
    predicted_energy: float | None
    deadline: float
    status: str = "open"
    digest: str | None = None
    outcome: dict[str, Any] | None = None

    def grant_row(self, *, similarity: float | None, created_at: float) -> dict[str, Any]:
        """The tasks-table row of this grant."""
        return {
            "id": self.task_id,
            "model_id": self.model_id,
            "device_id": self.device_id,
            "device_model": self.device_model,
            "version": self.version,
            "batch_size": self.batch_size,
            "similarity": similarity,
            "features": self.features,
            "predicted_time_ms": self.predicted_time_ms,
            "predicted_energy": self.predicted_energy,
            "created_at": created_at,
            "deadline": self.deadline,
            "status": "open",
        }

    def answer_row(
        self, digest: str, outcome: dict[str, Any], staleness: int, weight: float, now: float
    ) -> dict[str, Any]:
        """The tasks-table columns an answer changes."""
        return {
            "id": self.task_id,
            "status": "applied",
            "digest": digest,
            "outcome": outcome,
            "staleness": staleness,
            "weight": weight,
            "answered_at": now,
        }

    def measurement_row(self, result: TaskResult, now: float) -> dict[str, Any]:
        """Predicted against measured cost of this task (what I-Prof's evaluation charts)."""
        return {
            "task_id": self.task_id,
            "device_model": self.device_model,
            "batch_size": result.batch_size,
            "compute_time_ms": result.compute_time_ms,
            "predicted_time_ms": self.predicted_time_ms,
            "energy": result.energy,
            "predicted_energy": self.predicted_energy,
            "loss": result.loss,
            "at": now,
        }


class LeaseBook:
    """Open leases by id, plus a bounded window of answered ones for idempotent retries."""

    def __init__(self, *, sessions: sessionmaker[Session], answered_window: int = 50_000) -> None:
        self.sessions = sessions
        self.answered_window = answered_window
        self._open: dict[str, Lease] = {}
        self._answered: OrderedDict[str, Lease] = OrderedDict()

    def add(self, lease: Lease) -> None:
        self._open[lease.task_id] = lease

    def get(self, task_id: str) -> Lease | None:
        lease = self._open.get(task_id) or self._answered.get(task_id)
        if lease is not None:
            return lease
        with self.sessions() as session:
            row = repo.get_task(session=session, task_id=task_id)
        if row is None:
            return None
        return Lease(
            task_id=row.id,
            model_id=row.model_id,
            device_id=row.device_id,
            device_model=row.device_model,
            version=row.version,
            batch_size=row.batch_size,
            features=dict(row.features),
            predicted_time_ms=row.predicted_time_ms,
            predicted_energy=row.predicted_energy,
            deadline=row.deadline,
            status=row.status,
            digest=row.digest,
            outcome=row.outcome,
        )

    def answered(self, lease: Lease, digest: str, outcome: dict[str, Any]) -> None:
        lease.status, lease.digest, lease.outcome = "applied", digest, outcome
        self._open.pop(lease.task_id, None)
        self._answered[lease.task_id] = lease
        while len(self._answered) > self.answered_window:
            self._answered.popitem(last=False)

    def expire(self, now: float) -> None:
        """Forget open leases past their deadline (their rows are marked expired in storage)."""
        for task_id in [t for t, lease in self._open.items() if lease.deadline < now]:
            del self._open[task_id]
