"""Differential privacy: a device reads its own ε; the admin reads every device's and calibrates σ."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from fleet_protocol.accounting import ASSUMPTION, MECHANISM, RELATION, calibrate_noise
from server.api.deps import AuthenticatedDevice, CoordinatorDep
from server.api.errors import DEVICE_AUTH, INVALID, answer
from server.core.coordinator import Coordinator
from server.core.privacy import PrivacyLedger

device_router = APIRouter(prefix="/privacy", tags=["privacy"])
admin_router = APIRouter(prefix="/admin/privacy", tags=["admin"])
DP_OFF = {404: answer("differential privacy is off (FLEET_DP=false)")}


class DevicePrivacyOut(BaseModel):
    """One device's ledger: ε is the PLD bound under replace-one adjacency at the fixed δ (enforced)."""

    device_id: str
    tasks: int = Field(description="DP tasks granted (each counts, pushed or not)")
    local_examples: int | None = Field(description="N, the device's last reported dataset size")
    delta: float
    epsilon: float
    epsilon_pure: float = Field(0.0, description="the part of ε from pure (norm-Laplace) steps: Σ ε")
    epsilon_budget: float | None
    exhausted: bool = Field(description="not even one more task fits the budget")
    last_task_at: float | None
    mechanism: str = MECHANISM
    assumption: str = ASSUMPTION


class PrivacyOverviewOut(BaseModel):
    mechanism: str
    accountant: str
    assumption: str
    clip: float
    noise_multiplier: float
    epsilon_budget: float | None
    delta: float = Field(description="fixed for every device; a device with N ≥ 1/δ gets no task")
    epsilon_max: float = Field(description="the largest device ε: devices hold disjoint data")
    exhausted: int
    devices: list[DevicePrivacyOut]


class CalibrationOut(BaseModel):
    noise_multiplier: float = Field(description="the smallest σ meeting (ε, δ) after `steps` steps at rate q")
    epsilon: float
    delta: float
    sampling_rate: float
    steps: int
    accountant: str


def ledger_of(coordinator: Coordinator) -> PrivacyLedger:
    if coordinator.privacy is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "differential privacy is off (FLEET_DP=false)")
    return coordinator.privacy


@device_router.get("/me", response_model=DevicePrivacyOut, responses={**DEVICE_AUTH, **DP_OFF, **INVALID})
async def my_privacy(device: AuthenticatedDevice, coordinator: CoordinatorDep) -> DevicePrivacyOut:
    """The calling device's ε spent, its budget and the assumption the figure rests on."""
    ledger = ledger_of(coordinator)
    return DevicePrivacyOut(**await run_in_threadpool(ledger.device_view, device.device_id))


@admin_router.get("", response_model=PrivacyOverviewOut, responses=DP_OFF)
async def overview(coordinator: CoordinatorDep) -> PrivacyOverviewOut:
    """Every device's ε (PLD, replace-one), the overall figure, the budget and the stated assumption."""
    return PrivacyOverviewOut(**await run_in_threadpool(ledger_of(coordinator).overview))


@admin_router.get(
    "/devices/{device_id}",
    response_model=DevicePrivacyOut,
    responses={**DP_OFF, 404: answer("no such device")},
)
async def device_privacy(device_id: str, coordinator: CoordinatorDep) -> DevicePrivacyOut:
    """One device's ledger."""
    ledger = ledger_of(coordinator)
    if device_id not in ledger.devices and coordinator.store.device(device_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no device {device_id}")
    return DevicePrivacyOut(**await run_in_threadpool(ledger.device_view, device_id))


@admin_router.get("/calibrate", response_model=CalibrationOut, responses=INVALID)
async def calibrate(
    epsilon: float = Query(ge=0.01, le=100, description="target ε"),
    delta: float = Query(ge=1e-12, le=0.1, description="target δ (e.g. 1e-8, the default setting)"),
    sampling_rate: float = Query(ge=1e-9, le=1, description="q = batch / N"),
    steps: int = Query(ge=1, le=10_000, description="tasks per device"),
) -> CalibrationOut:
    """The noise multiplier σ that keeps ``steps`` tasks at rate q within (ε, δ)."""
    try:
        sigma = await run_in_threadpool(calibrate_noise, epsilon, delta, sampling_rate, steps)
    except Exception as exc:  # dp-accounting's search gives up (no bracket) on extreme targets
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            f"no noise multiplier meets ε = {epsilon:g}, δ = {delta:g}: {exc}",
        ) from exc
    return CalibrationOut(
        noise_multiplier=sigma,
        epsilon=epsilon,
        delta=delta,
        sampling_rate=sampling_rate,
        steps=steps,
        accountant=f"pld ({RELATION})",
    )
