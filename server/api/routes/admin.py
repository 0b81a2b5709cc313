"""Administration: push a model, steer training, read the figures. Every route needs the admin token."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from models.check import BundleError, load_checked_zip
from server.api.deps import CoordinatorDep, require_admin
from server.api.errors import INVALID, JSON_BODY, NO_RUN, WITH_BODY
from server.api.params import ModelFilter
from server.api.routes.models import model_out
from server.api.schemas import EvaluationOut, ModelOut, StopCriterion
from server.core.records import task_records

router = APIRouter(prefix="/admin", tags=["admin"])
AdminOnly = Depends(require_admin)


# The route parses its multipart body itself (bounded part size), so its form is written out here.
UPLOAD_FORM: dict[str, object] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["bundle"],
                    "properties": {
                        "bundle": {
                            "type": "string",
                            "format": "binary",
                            "description": "a zip (application/zip) of manifest.json, train.onnx, infer.onnx "
                            "and init.bin (docs/model-bundles.md)",
                        }
                    },
                },
            }
        },
    }
}


@router.post(
    "/models",
    status_code=status.HTTP_201_CREATED,
    response_model=ModelOut,
    responses=WITH_BODY,
    openapi_extra=UPLOAD_FORM,
)
async def push_model(request: Request, coordinator: CoordinatorDep) -> ModelOut:
    """Upload an export bundle (multipart part ``bundle``: a zip); it becomes the model that trains."""
    try:
        form = await request.form(max_files=1, max_fields=1, max_part_size=request.app.state.max_body_bytes)
    except Exception as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"malformed multipart body: {exc}"
        ) from exc
    try:
        part = form.get("bundle")
        if not isinstance(part, UploadFile):
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT, "multipart file part 'bundle' is missing"
            )
        data = await part.read()
    finally:
        await form.close()
    try:  # refused before anything is stored: the active model and its version stay as they were
        bundle = await run_in_threadpool(load_checked_zip, data)
    except BundleError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"invalid bundle: {exc}") from exc
    info = await run_in_threadpool(coordinator.add_model, bundle)
    return model_out(info, dp=coordinator.privacy_policy is not None)


@router.post("/training/pause", status_code=status.HTTP_204_NO_CONTENT, responses=NO_RUN)
def pause(coordinator: CoordinatorDep) -> None:
    coordinator.pause()


@router.post("/training/resume", status_code=status.HTTP_204_NO_CONTENT, responses=NO_RUN)
def resume(coordinator: CoordinatorDep) -> None:
    coordinator.resume()


@router.put("/training/stop", status_code=status.HTTP_204_NO_CONTENT, responses={**NO_RUN, **JSON_BODY})
def stop_criterion(body: StopCriterion, coordinator: CoordinatorDep) -> None:
    coordinator.set_stop(target_accuracy=body.target_accuracy, max_versions=body.max_versions)


@router.get("/stats")
def stats(coordinator: CoordinatorDep) -> dict[str, Any]:
    return coordinator.stats()


@router.get("/evaluations", response_model=list[EvaluationOut], responses=INVALID)
def evaluations(coordinator: CoordinatorDep, model_id: ModelFilter = None) -> list[EvaluationOut]:
    model_id = model_id or (coordinator.run.model_id if coordinator.run else None)
    return [EvaluationOut(**e) for e in coordinator.evaluations(model_id)] if model_id else []


@router.get("/records", responses=INVALID)
def records(
    coordinator: CoordinatorDep, limit: int = Query(500, ge=1, le=10_000), model_id: ModelFilter = None
) -> list[dict[str, Any]]:
    """The newest answered tasks: staleness seen, τ_thres and the weight each gradient was applied with."""
    model_id = model_id or (coordinator.run.model_id if coordinator.run else None)
    return task_records(store=coordinator.store, model_id=model_id, limit=limit) if model_id else []
