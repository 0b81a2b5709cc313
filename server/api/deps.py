"""Named dependencies: who is calling (device or admin) and the coordinator they talk to."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from server.api.metrics import Metrics
from server.core.coordinator import Coordinator
from server.core.types import Device

bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


# The per-request dependencies are ``async def`` when they never block: FastAPI runs a plain ``def``
# dependency in the thread pool, and those hops were a large share of a push's CPU time.
async def get_coordinator(request: Request) -> Coordinator:
    return request.app.state.coordinator


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


CoordinatorDep = Annotated[Coordinator, Depends(get_coordinator)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


async def current_device(request: Request, credentials: Credentials) -> Device:
    """The calling device, within its request rate: one dependency, as every device request pays for
    each node FastAPI resolves."""
    if credentials is None:
        raise _unauthorized("missing bearer token")
    coordinator: Coordinator = request.app.state.coordinator
    token = credentials.credentials
    device = coordinator.devices.cached(token)
    if device is None:  # not seen since start: the database answers, off the event loop
        device = await run_in_threadpool(coordinator.devices.authenticate, token)
    if device is None:
        raise _unauthorized("unknown device token")
    wait = request.app.state.rate_limiter.acquire(device.device_id)
    if wait > 0:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            "request rate limit exceeded",
            headers={"Retry-After": str(max(1, round(wait)))},
        )
    return device


LimitedDevice = Annotated[Device, Depends(current_device)]


def require_admin(request: Request, credentials: Credentials) -> None:
    if credentials is None:
        raise _unauthorized("missing admin token")
    if not secrets.compare_digest(credentials.credentials.encode(), request.app.state.admin_token.encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "not an admin token")
