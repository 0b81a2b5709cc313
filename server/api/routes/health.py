"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response, status
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from server.api.deps import CoordinatorDep, MetricsDep
from server.api.errors import answer

router = APIRouter(tags=["operations"])


@router.get("/v1/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/ready", responses={503: answer("the database is unreachable, or no model is loaded")})
def ready(coordinator: CoordinatorDep) -> dict[str, object]:
    try:
        coordinator.store.ping()
    except Exception as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"database unreachable: {exc}") from exc
    if coordinator.run is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "no model loaded")
    return {"status": "ready", "model_id": coordinator.run.model_id, "version": coordinator.run.version}


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
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
