"""The models page's actions: upload a bundle, promote a version (or another model), roll back, download."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import UploadFile

from models.check import BundleError, load_checked_zip
from server.console.web import CheckedSession, Session, audit, coordinator_of
from server.core.errors import CoordinatorError, Gone

router = APIRouter(prefix="/models")


def back(msg: str | None = None, error: str | None = None) -> RedirectResponse:
    query = f"msg={quote(msg)}" if msg else f"error={quote(error or '')}"
    return RedirectResponse(f"/admin/models?{query}", status.HTTP_303_SEE_OTHER)


@router.post("", include_in_schema=False)
async def upload(request: Request, session: CheckedSession) -> Response:
    """A bundle zip, checked as ``POST /v1/admin/models`` checks it; it becomes the model that trains."""
    form = await request.form(max_files=1, max_part_size=request.app.state.max_body_bytes)
    part = form.get("bundle")
    if not isinstance(part, UploadFile):
        return back(error="choose a bundle (.zip) to upload")
    data = await part.read()
    try:
        bundle = await run_in_threadpool(load_checked_zip, data)
    except BundleError as exc:
        return back(error=f"invalid bundle: {exc}")
    coordinator = coordinator_of(request)  # the core's ModelAdded event is the audit entry
    info = await run_in_threadpool(lambda: coordinator.add_model(bundle, actor=session.username))
    return back(f"model {info.model_id} uploaded and training")


@router.post("/{model_id}/versions/{version}/promote", include_in_schema=False)
async def promote(request: Request, session: CheckedSession, model_id: str, version: int) -> Response:
    coordinator = coordinator_of(request)
    run = coordinator.run
    before = {"model_id": run.model_id, "version": run.version} if run else None
    try:
        head = await run_in_threadpool(lambda: coordinator.promote(model_id, version, actor=session.username))
    except CoordinatorError as exc:
        return back(error=str(exc))
    after = {"model_id": head[0], "version": head[1], "params_of": version}
    await audit(request, session, "version_promoted", old=before, new=after)
    return back(f"version {version} of {model_id} is now the head (version {head[1]})")


@router.post("/rollback", include_in_schema=False)
async def rollback(request: Request, session: CheckedSession) -> Response:
    coordinator = coordinator_of(request)
    run = coordinator.run
    before = {"model_id": run.model_id, "version": run.version} if run else None
    try:
        head = await run_in_threadpool(lambda: coordinator.rollback(actor=session.username))
    except CoordinatorError as exc:
        return back(error=str(exc))
    await audit(request, session, "rolled_back", old=before, new={"model_id": head[0], "version": head[1]})
    return back(f"rolled back: {head[0]} trains from version {head[1]}")


async def download(read: Callable[[], bytes], filename: str) -> Response:
    """``read()``'s bytes as an attachment; 404 when the core does not have them (410 past retention)."""
    try:
        data = await run_in_threadpool(read)
    except Gone as exc:
        raise HTTPException(status.HTTP_410_GONE, str(exc)) from exc
    except CoordinatorError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(data, media_type="application/octet-stream", headers=headers)


@router.get("/{model_id}/{which}.onnx", include_in_schema=False)
async def graph(request: Request, session: Session, model_id: str, which: str) -> Response:
    """``infer`` (the inference graph to ship in an app) or ``train`` (the gradient graph devices run)."""
    catalog = coordinator_of(request).catalog
    return await download(lambda: catalog.graph(model_id, which), f"{model_id}-{which}.onnx")


@router.get("/{model_id}/versions/{version}.bin", include_in_schema=False)
async def params(request: Request, session: Session, model_id: str, version: int) -> Response:
    """A version's parameters: little-endian float32, in the manifest's order."""
    catalog = coordinator_of(request).catalog
    return await download(lambda: catalog.params_bytes(model_id, version), f"{model_id}-v{version}.bin")
