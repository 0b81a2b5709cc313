"""Named dependencies: who is calling (device or admin) and the coordinator they talk to."""

from __future__ import annotations

import math
import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from server.api.metrics import Metrics
from server.core.coordinator import Coordinator
from server.core.types import Device
from server.ratelimit import RateLimiter

# Two security schemes (same header) so the OpenAPI document says which token each route wants.
device_bearer = HTTPBearer(
    scheme_name="DeviceToken", description="the token `POST /v1/devices` returned", auto_error=False
)
admin_bearer = HTTPBearer(
    scheme_name="AdminToken", description="the admin token (FLEET_ADMIN_TOKEN)", auto_error=False
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(device_bearer)]
AdminCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(admin_bearer)]


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


def _over_limit(limiter: RateLimiter, key: str, detail: str = "request rate limit exceeded") -> None:
    """429 with a Retry-After when ``key`` is over its rate (token bucket)."""
    wait = limiter.acquire(key)
    if wait > 0:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS, detail, headers={"Retry-After": str(max(1, math.ceil(wait)))}
        )


async def current_device(request: Request, credentials: Credentials) -> Device:
    """The calling device (401 without a valid bearer token). Not rate-limited: a push answers a grant
    the coordinator issued, so the limit on task requests already bounds it."""
    if credentials is None:
        raise _unauthorized("missing bearer token")
    coordinator: Coordinator = request.app.state.coordinator
    token = credentials.credentials
    device = coordinator.devices.cached(token)
    if device is None:  # not seen since start: the database answers, off the event loop
        device = await run_in_threadpool(coordinator.devices.authenticate, token)
    if device is None:
        raise _unauthorized("unknown device token")
    return device


async def limited_device(request: Request, credentials: Credentials) -> Device:
    """The calling device, within its task-request rate (one dependency: each node FastAPI resolves
    costs every device request)."""
    device = await current_device(request, credentials)
    _over_limit(request.app.state.rate_limiter, device.device_id)
    return device


async def enrollment_rate(request: Request) -> None:
    """Enrollment within its rate per client address (no device identity exists yet)."""
    address = request.client.host if request.client is not None else "unknown"
    _over_limit(request.app.state.enroll_limiter, address)


def key_rate(request: Request, key_id: str) -> None:
    """Enrollment within its rate per enrollment key, from all addresses together (a key's holder with
    many addresses must not enroll a burst of Sybils). Called once the key is known to be valid, so a
    wrong key never spends a real key's tokens."""
    _over_limit(request.app.state.enroll_key_limiter, key_id, "enrollment rate limit of this key exceeded")


class DeviceToken(HTTPBearer):
    """The calling device, as one dependency that is also the DeviceToken security scheme (the OpenAPI
    document is the same as with ``current_device`` on ``device_bearer``): FastAPI resolves every
    dependency of a route on every request, and a device makes two per task."""

    def __init__(self, *, limited: bool) -> None:
        description = device_bearer.model.description
        super().__init__(scheme_name=device_bearer.scheme_name, description=description, auto_error=False)
        self.limited = limited

    async def __call__(self, request: Request) -> Device:  # type: ignore[override]
        credentials = await super().__call__(request)
        if self.limited:
            return await limited_device(request, credentials)
        return await current_device(request, credentials)


AuthenticatedDevice = Annotated[Device, Depends(DeviceToken(limited=False))]
LimitedDevice = Annotated[Device, Depends(DeviceToken(limited=True))]


def require_admin(request: Request, credentials: AdminCredentials) -> None:
    if credentials is None:
        raise _unauthorized("missing admin token")
    if not secrets.compare_digest(credentials.credentials.encode(), request.app.state.admin_token.encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "not an admin token")
