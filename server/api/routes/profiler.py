"""The profiler's view for the console: each device model's I-Prof state and predicted-vs-measured pairs.

Admin only (included under the admin dependency); the core's ``ProfilerView`` answers.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from server.api.deps import CoordinatorDep
from server.api.errors import INVALID, answer
from server.api.params import DeviceModel

router = APIRouter(prefix="/admin/profiler", tags=["profiler"])


@router.get("")
def profiler_overview(coordinator: CoordinatorDep) -> dict[str, Any]:
    """Settings, and per device model: personal-model update counts and measurement counts."""
    return coordinator.profiles.overview()


@router.get("/{device_model}", responses={404: answer("this device model was never seen"), **INVALID})
def device_model_profile(
    device_model: DeviceModel, coordinator: CoordinatorDep, limit: int = Query(100, ge=1, le=1000)
) -> dict[str, Any]:
    """One device model's personal models (standardised-space coefficients) and its latest pairs."""
    return coordinator.profiles.device_model(device_model, limit=limit)
