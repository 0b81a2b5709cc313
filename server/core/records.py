"""Per-gradient records (staleness seen, τ_thres, weight applied) read back from the tasks table.

The figures of the experiments (staleness histograms, CDFs of applied weights) come from these, so the
console can draw the same curves from a live server.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from server.store import repository as repo


def task_records(*, sessions: sessionmaker[Session], model_id: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` answered tasks of a model, oldest first."""
    with sessions() as session:
        rows = repo.recent_tasks(session=session, model_id=model_id, limit=limit)
    return [
        {
            "task_id": r.id,
            "device_model": r.device_model,
            "base_version": r.version,
            "version": (r.outcome or {}).get("version"),
            "applied": (r.outcome or {}).get("applied"),
            "staleness": r.staleness,
            "weight": r.weight,
            "tau_thres": (r.outcome or {}).get("tau_thres"),
            "similarity": r.similarity,
            "batch_size": r.batch_size,
            "answered_at": r.answered_at,
        }
        for r in reversed(rows)
    ]
