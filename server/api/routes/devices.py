"""Enrollment: an enrollment key buys a device identity and a bearer token."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool

from server.api.deps import CoordinatorDep, enrollment_rate
from server.api.errors import JSON_BODY, RATE_LIMITED, answer
from server.api.schemas import EnrollIn, EnrollOut

router = APIRouter(prefix="/devices", tags=["devices"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=EnrollOut,
    dependencies=[Depends(enrollment_rate)],
    responses={
        401: answer("wrong enrollment key"),
        403: answer("the install_secret is a revoked device's"),
        **RATE_LIMITED,
        **JSON_BODY,
    },
)
async def enroll(body: EnrollIn, request: Request, coordinator: CoordinatorDep) -> EnrollOut:
    """The bootstrap key (FLEET_ENROLLMENT_KEY) or a stored key the console created and did not revoke.
    With an ``install_secret`` seen before (under any valid key), the same device id and a new token."""
    key = body.enrollment_key
    bootstrap = secrets.compare_digest(key.encode(), request.app.state.enrollment_key.encode())
    if not bootstrap and not await run_in_threadpool(coordinator.devices.enrollment_key_valid, key):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong enrollment key")
    device, token = await run_in_threadpool(coordinator.enroll, body.device_model, body.install_secret)
    return EnrollOut(device_id=device.device_id, token=token)
