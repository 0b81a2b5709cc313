"""The app factory: builds the coordinator (server/compose.py) in ``lifespan`` and only assembles routers."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from server import console, device
from server.api import openapi
from server.api.bodylimit import BodyLimit
from server.api.errors import ADMIN_AUTH, STORAGE_DOWN
from server.api.hotpull import ParamsFromMemory
from server.api.metrics import Metrics
from server.api.opsauth import OpsToken
from server.api.routes import admin, devices, enrollment, health, models, privacy, tasks
from server.api.routes import profiler as profiler_routes
from server.compose import build_coordinator, build_evaluation_loop, build_store
from server.console import open_console
from server.core.errors import (
    Conflict,
    CoordinatorError,
    EnrollmentCodeExpired,
    EnrollmentRefused,
    Forbidden,
    Gone,
    InvalidInput,
    NotFound,
    StorageUnavailable,
    TrainingFinished,
    Unauthorized,
)
from server.ratelimit import RateLimiter, apply_limits
from server.settings import Settings, get_settings, with_overrides
from server.store.admin import AdminStore

log = logging.getLogger("fleet.server")
STATUS = {NotFound: 404, Unauthorized: 401, Forbidden: 403, Gone: 410, Conflict: 409, InvalidInput: 422}


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its JSON5 spelling (``"NaN"``, ``"Infinity"``):
    a validation error echoes the input, and strict JSON cannot carry those numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 ``{"detail": [{"loc", "msg", "type", "input"}]}``, always serialisable (FastAPI's own handler
    fails with a 500 when the rejected input holds a NaN or an Infinity)."""
    return JSONResponse({"detail": json_safe(jsonable_encoder(exc.errors()))}, status_code=422)


def refusal_body(exc: CoordinatorError) -> dict[str, Any]:
    """The error body of a core refusal: its sentence, and the reason a device acts on when it has one
    (training finished: stop asking; an enrollment refused or a join code expired: stop enrolling,
    client/_transport.py)."""
    body: dict[str, Any] = {"detail": str(exc)}
    if isinstance(exc, EnrollmentRefused | EnrollmentCodeExpired):
        body.update(reason=exc.reason)
    if isinstance(exc, TrainingFinished):
        body.update(reason="training_finished", retry_after=300.0)
    return body


def _with_saved_changes(settings: Settings, admin_store: AdminStore) -> Settings:
    """The settings with what the console changed and saved (settings_overrides) applied; if those cannot
    be read or no longer validate, the configured settings, and a warning (training must start anyway)."""
    try:
        overrides = admin_store.overrides()
        return with_overrides(settings, overrides) if overrides else settings
    except Exception:
        log.exception("the console's saved settings could not be applied; starting with the configured ones")
        return settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = build_store(settings)
        admin_store = AdminStore(store.sessions)
        effective = _with_saved_changes(settings, admin_store)
        coordinator = build_coordinator(effective, store=store)
        app.state.coordinator, app.state.settings, app.state.admin_store = coordinator, effective, admin_store
        apply_limits(app.state, effective)
        if settings.console:
            app.state.console = open_console(effective, admin_store)
        app.state.enrollment_key, app.state.admin_token = settings.secrets()
        # an API worker evaluates nothing and follows the aggregator's versions (docs/scale-out.md)
        loop = build_evaluation_loop(settings, coordinator) if settings.role == "all" else None
        listener = None
        if settings.role == "api":
            from server.scale.worker import follow_versions  # imports redis: only an API worker needs it

            listener = follow_versions(settings, coordinator)
        try:
            yield
        finally:
            if loop is not None:
                loop.stop()
                loop.join(timeout=10)
            if listener is not None:
                listener.stop()
            coordinator.close()

    # /docs and /redoc with their assets served by the coordinator itself: no CDN on a private network
    app = FastAPIOffline(
        static_url="/docs-assets",
        title="Fleet coordinator",
        version="0.1.0",
        lifespan=lifespan,
        description="Online federated learning: async strategies, I-Prof, ONNX devices. See docs/protocol.md",
        generate_unique_id_function=lambda route: route.name,  # operationIds a generated client can use
    )
    app.state.metrics = Metrics()
    # task requests per device; enrollment per client address; pushes are not limited (they answer grants)
    app.state.rate_limiter = RateLimiter(rate=settings.rate_limit_per_second, burst=settings.rate_limit_burst)
    app.state.enroll_limiter = RateLimiter(rate=settings.enroll_rate_per_second, burst=settings.enroll_burst)
    app.state.enroll_key_limiter = RateLimiter(
        rate=settings.enroll_key_rate_per_second, burst=settings.enroll_key_burst
    )
    app.state.max_body_bytes = settings.max_body_bytes
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_seconds)
    app.add_middleware(ParamsFromMemory, state=app.state)  # a task's pull, before routing (hotpull.py)

    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]

    @app.exception_handler(CoordinatorError)
    async def coordinator_error(request: Request, exc: CoordinatorError) -> JSONResponse:
        code = next((c for cls, c in STATUS.items() if isinstance(exc, cls)), 400)
        app.state.metrics.bad_pushes.labels(str(code)).inc()
        body = refusal_body(exc)
        return JSONResponse(body, status_code=code)

    @app.exception_handler(StorageUnavailable)
    async def storage_unavailable(request: Request, exc: StorageUnavailable) -> JSONResponse:
        """The database is down or a commit failed: nothing of the request is durable, retry it."""
        return JSONResponse(
            {"detail": str(exc), "reason": "storage_unavailable", "retry_after": exc.retry_after},
            status_code=503,
            headers={"Retry-After": str(max(1, round(exc.retry_after)))},
        )

    # every route that reads or writes the database may answer 503 storage_unavailable; the task routes
    # first: FastAPI tries the routers in order, twice per request, and every task asks then pushes
    for router in (tasks.router, models.router, devices.router, privacy.device_router):
        app.include_router(router, prefix="/v1", responses=STORAGE_DOWN)
    for router in (admin.router, enrollment.router, profiler_routes.router, privacy.admin_router):
        app.include_router(
            router, prefix="/v1", dependencies=[admin.AdminOnly], responses={**ADMIN_AUTH, **STORAGE_DOWN}
        )
    if settings.console:  # after the device API: a device's request is not matched against /admin's routes
        console.install(app)
    device.install(app)  # the browser device's static page at /device/ (server/device)
    app.include_router(health.router)
    openapi.install(app)  # one error schema; the hand-written request forms' schemas
    _outer_guards(app, settings)
    return app


def _outer_guards(app: FastAPI, settings: Settings) -> None:
    """The operations token, then the trusted proxies' headers: added last, so outermost, every layer
    (the throttles, the console's origin check) sees the real client address and scheme. `fleet serve`
    turns uvicorn's own proxy handling off: it would believe X-Forwarded-For from 127.0.0.1."""
    if settings.ops_token is not None:
        app.add_middleware(OpsToken, token=settings.ops_token.get_secret_value())
    if settings.proxy_list():
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.proxy_list())
