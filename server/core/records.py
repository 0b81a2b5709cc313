"""Per-gradient records (staleness seen, τ_thres, weight applied) read back from storage.

The figures of the experiments (staleness histograms, CDFs of applied weights) come from these, so the
console can draw the same curves from a live server.
"""

from __future__ import annotations

from typing import Any

from server.core.ports import Store


def task_records(*, store: Store, model_id: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` answered tasks of a model, oldest first."""
    return [
        {
            "task_id": r.task_id,
            "device_model": r.device_model,
            "base_version": r.base_version,
            "version": r.outcome.get("version"),
            "applied": r.outcome.get("applied"),
            "staleness": r.staleness,
            "weight": r.weight,
            "tau_thres": r.outcome.get("tau_thres"),
            "similarity": r.similarity,
            "batch_size": r.batch_size,
            "answered_at": r.answered_at,
        }
        for r in reversed(store.answered_tasks(model_id, limit))
    ]
