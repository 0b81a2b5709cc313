"""The profiler's view for the console: each device model's I-Prof state and predicted-vs-measured pairs.

Admin only (included under the admin dependency). Profiler state is read from the live profiler
(personal models are updated in memory after every push); the pairs come from the measurements table.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, status

from server.api.deps import CoordinatorDep
from server.store import repository as repo

router = APIRouter(prefix="/admin/profiler", tags=["profiler"])


def _settings(profiler: Any) -> dict[str, Any]:
    primary = getattr(profiler, "primary", profiler)
    out: dict[str, Any] = {
        "kind": repr(profiler) if primary is not profiler else type(profiler).__name__,
        "time_slo_ms": getattr(primary, "time_slo_ms", None),
        "energy_slo": getattr(primary, "energy_slo", None),
        "min_batch": getattr(primary, "min_batch", None),
        "max_batch": getattr(primary, "max_batch", None),
    }
    return out


@router.get("")
def profiler_overview(coordinator: CoordinatorDep) -> dict[str, Any]:
    """Settings, and per device model: personal-model update counts and measurement counts."""
    profiler = coordinator.profiler
    with coordinator.sessions() as session:
        counts = repo.measurement_counts(session=session)
    personal = set(profiler.device_models()) if hasattr(profiler, "device_models") else set()
    models = []
    for device_model in sorted(personal | set(counts)):
        state = profiler.device_state(device_model) if device_model in personal else {}
        n, last = counts.get(device_model, (0, None))
        models.append(
            {
                "device_model": device_model,
                "personal": device_model in personal,
                "time_updates": (state.get("time") or {}).get("n_updates", 0),
                "energy_updates": (state.get("energy") or {}).get("n_updates", 0),
                "measurements": n,
                "last_measurement_at": last,
            }
        )
    return {"profiler": _settings(profiler), "device_models": models}


@router.get("/{device_model}")
def device_model_profile(
    device_model: str, coordinator: CoordinatorDep, limit: int = Query(100, ge=1, le=1000)
) -> dict[str, Any]:
    """One device model's personal models (standardised-space coefficients) and its latest pairs."""
    profiler = coordinator.profiler
    with coordinator.sessions() as session:
        rows = repo.device_measurements(session=session, device_model=device_model, limit=limit)
    personal = device_model in set(profiler.device_models())
    if not rows and not personal:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no profile for device model {device_model!r}")
    slo = _settings(profiler)["time_slo_ms"]
    pairs = [
        {
            "task_id": r.task_id,
            "at": r.at,
            "batch_size": r.batch_size,
            "predicted_time_ms": r.predicted_time_ms,
            "time_ms": r.compute_time_ms,
            "time_error_of_slo": None if not slo else (r.compute_time_ms - slo) / slo,
            "predicted_energy": r.predicted_energy,
            "energy": r.energy,
        }
        for r in rows
    ]
    return {
        "device_model": device_model,
        "source": "personal" if personal else "cold",
        "state": profiler.device_state(device_model) if personal else None,
        "pairs": pairs,
    }
