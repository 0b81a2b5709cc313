"""The app factory: builds the coordinator in ``lifespan`` and only assembles routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from models.manifest import builtin
from profiler import IProf
from profiler.dispatch import RoundRobinDispatcher, with_maui_baseline
from server.api.bodylimit import BodyLimit
from server.api.metrics import Metrics
from server.api.ratelimit import RateLimiter
from server.api.routes import admin, devices, health, models, tasks
from server.api.routes import profiler as profiler_routes
from server.core.admission import AdmissionController
from server.core.coordinator import Coordinator
from server.core.errors import (
    Conflict,
    CoordinatorError,
    Forbidden,
    Gone,
    InvalidInput,
    NotFound,
    TrainingFinished,
)
from server.core.evaluation import Evaluator
from server.core.evaluation_loop import EvaluationLoop
from server.settings import Settings, get_settings
from server.store.database import make_engine, migrate, session_factory
from server.strategies import make_strategy

log = logging.getLogger("fleet.server")
STATUS = {NotFound: 404, Forbidden: 403, Gone: 410, Conflict: 409, InvalidInput: 422}


def strategy_params(settings: Settings) -> dict[str, object]:
    common: dict[str, object] = {
        "learning_rate": settings.learning_rate,
        "k": settings.k,
        "time_window": settings.time_window,
    }
    if settings.strategy == "adasgd":
        common.update(
            percentile=settings.percentile,
            bootstrap=settings.bootstrap,
            staleness_cap=settings.staleness_cap,
            boost_floor=settings.boost_floor,
            boost_scope=settings.boost_scope,
            global_counts=settings.global_counts,
        )
    if settings.strategy == "ssgd":
        common.update(over_selection=settings.over_selection)
    return common


def build_profiler(settings: Settings) -> IProf | RoundRobinDispatcher:
    profiler = IProf(
        time_slo_ms=settings.time_slo_ms,
        energy_slo=settings.energy_slo,
        min_batch=settings.min_batch,
        max_batch=settings.max_batch,
        **settings.profiler_params,
    )
    if settings.profiler_bootstrap is not None:
        profiler.load_bootstrap(settings.profiler_bootstrap)
    else:
        profiler.fit_prior()
    if settings.profiler_baseline == "maui":
        return with_maui_baseline(profiler, settings.profiler_bootstrap)
    return profiler


def build_coordinator(settings: Settings) -> Coordinator:
    engine = make_engine(settings.resolved_database_url())
    migrate(engine)
    coordinator = Coordinator(
        sessions=session_factory(engine),
        profiler=build_profiler(settings),
        strategy_factory=lambda: make_strategy(settings.strategy, **strategy_params(settings)),
        admission=AdmissionController(size_drop=settings.size_drop, similarity_drop=settings.similarity_drop),
        lease_seconds=settings.lease_seconds,
        max_gradient_norm=settings.max_gradient_norm,
        version_retention=settings.version_retention,
    )
    coordinator.start()
    if settings.profiler_bootstrap is not None:
        coordinator.save_cold_profile()
    if coordinator.run is None and settings.initial_model:
        coordinator.add_model(builtin(settings.initial_model), actor="startup")
    if settings.target_accuracy is not None or settings.max_versions is not None:
        coordinator.set_stop(target_accuracy=settings.target_accuracy, max_versions=settings.max_versions)
    return coordinator


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        coordinator = build_coordinator(settings)
        app.state.coordinator = coordinator
        app.state.enrollment_key, app.state.admin_token = settings.secrets()
        loop = None
        if settings.eval_data is not None:
            with np.load(settings.eval_data) as data:
                x, y = data["x"], data["y"]

            def make_evaluator(model_id: str) -> Evaluator:
                row = coordinator.catalog.row(model_id)
                return Evaluator(coordinator.catalog.manifest(model_id), row.infer_onnx, x, y)

            loop = EvaluationLoop(
                coordinator,
                make_evaluator,
                every_versions=settings.eval_every_versions,
                interval_s=settings.eval_interval_s,
            )
            loop.start()
        try:
            yield
        finally:
            if loop is not None:
                loop.stop()
                loop.join(timeout=10)
            coordinator.close()

    app = FastAPI(
        title="Fleet coordinator",
        version="0.1.0",
        lifespan=lifespan,
        description="Online federated learning: AdaSGD, I-Prof, ONNX devices. See docs/protocol.md.",
    )
    app.state.metrics = Metrics()
    app.state.rate_limiter = RateLimiter(rate=settings.rate_limit_per_second, burst=settings.rate_limit_burst)
    app.state.max_body_bytes = settings.max_body_bytes
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(CoordinatorError)
    async def coordinator_error(request: Request, exc: CoordinatorError) -> JSONResponse:
        code = next((c for cls, c in STATUS.items() if isinstance(exc, cls)), 400)
        app.state.metrics.bad_pushes.labels(str(code)).inc()
        body = {"detail": str(exc)}
        if isinstance(exc, TrainingFinished):
            body.update(reason="training_finished", retry_after=300.0)
        return JSONResponse(body, status_code=code)

    for router in (devices.router, tasks.router, models.router):
        app.include_router(router, prefix="/v1")
    app.include_router(admin.router, prefix="/v1", dependencies=[admin.AdminOnly])
    app.include_router(profiler_routes.router, prefix="/v1", dependencies=[admin.AdminOnly])
    app.include_router(health.router)
    return app
