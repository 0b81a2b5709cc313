"""Enrollment: an enrollment key buys a device identity and a bearer token, within the key's limits."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool

from server.api.deps import CoordinatorDep, enrollment_rate, key_rate
from server.api.errors import JSON_BODY, RATE_LIMITED, answer
from server.api.schemas import EnrollIn, EnrollOut

router = APIRouter(prefix="/devices", tags=["devices"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=EnrollOut,
    dependencies=[Depends(enrollment_rate)],
    responses={
        401: answer(
            "wrong enrollment key; or, with reason enrollment_code_expired, a join code past its end (the "
            "device stops on it: the same code cannot succeed again)"
        ),
        403: answer(
            "refused, with a reason the device stops on: enrollment_quota (the key has enrolled its quota "
            "of devices), attestation_refused, install_revoked (the install_secret is a revoked device's)"
        ),
        **RATE_LIMITED,
        **JSON_BODY,
    },
)
async def enroll(body: EnrollIn, request: Request, coordinator: CoordinatorDep) -> EnrollOut:
    """The bootstrap key (FLEET_ENROLLMENT_KEY) or a stored key the console created and did not revoke,
    nor let expire (a join code: the page at /device/ sends the code of ``#join=CODE`` here). With an
    ``install_secret`` seen before (under any valid key), the same device id and a new token, not counted
    again. Limits: per address, per key (429 with Retry-After), and the key's quota (403)."""
    secret = body.enrollment_key
    bootstrap = secrets.compare_digest(secret.encode(), request.app.state.enrollment_key.encode())
    key = await run_in_threadpool(coordinator.devices.resolve_key, secret, bootstrap=bootstrap)
    if key is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong enrollment key")
    key_rate(request, key.key.key_id)
    device, token = await run_in_threadpool(
        lambda: coordinator.enroll(
            body.device_model, body.install_secret, key=key, attestation=body.attestation
        )
    )
    return EnrollOut(device_id=device.device_id, token=token)
