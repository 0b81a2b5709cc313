"""Liveness, readiness and Prometheus metrics.

Readiness means "can serve": 503 only while the coordinator's health is "down" (storage unavailable or
unusable, or no model loaded). "degraded" (no pushes, devices failing, privacy spent, accuracy falling, the
journal behind) answers 200 with the reasons in the body: a load balancer that dropped such a coordinator
would not bring the devices back, and every coordinator would read the same fleet (docs/health.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from server.api.deps import CoordinatorDep, MetricsDep
from server.api.errors import answer
from server.core.health import DOWN

router = APIRouter(tags=["operations"])


@router.get("/v1/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/v1/ready",
    responses={
        503: answer(
            "down: the database is unreachable or unusable, or no model is loaded (reason: "
            "storage_unavailable or no_model; the body's health lists every reason)"
        )
    },
)
def ready(coordinator: CoordinatorDep) -> Any:
    """200 while the coordinator can serve, with its health ("ok" or "degraded", and why)."""
    state = coordinator.health()
    run = coordinator.run
    if state.state == DOWN or run is None:
        down = [r for r in state.reasons if r.state == DOWN]
        detail = "; ".join(r.message for r in down) or "no model loaded"
        body = {"detail": detail, "reason": down[0].code if down else "no_model", "health": state.to_dict()}
        return JSONResponse(body, status_code=503)
    return {"status": "ready", "model_id": run.model_id, "version": run.version, "health": state.to_dict()}


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request, metrics: MetricsDep, coordinator: CoordinatorDep) -> Response:
    if coordinator.run is not None:
        metrics.version.set(coordinator.run.version)
        if coordinator.run.latest_accuracy is not None:
            metrics.accuracy.set(coordinator.run.latest_accuracy)
    if coordinator.privacy is not None:
        privacy = coordinator.privacy.overview()
        metrics.epsilon_max.set(privacy["epsilon_max"])
        metrics.budget_exhausted.set(privacy["exhausted"])
    pending, oldest = coordinator.journal.backlog()
    age = 0.0 if oldest is None else max(0.0, coordinator.clock() - oldest)
    metrics.observe_health(coordinator.health(), pending, age)
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
