"""The models page's data and actions: upload a bundle, promote a version (or another model), roll back,
note a version, download (the inference model as the API serves it: server/core/inference_export.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import UploadFile

from models.check import BundleError, load_checked_zip
from server.console.web import CheckedSession, Session, audit, coordinator_of
from server.core.coordinator import Coordinator
from server.core.errors import CoordinatorError, Gone
from server.core.inference_export import export_inference
from server.core.lineage import HeadHistory, head_history

router = APIRouter(prefix="/models")
NEWEST_VERSIONS, MAX_VERSIONS = 5, 60  # a model's versions listed: the newest, then the notable ones
MAX_INT = 2**31 - 1  # a version number as storage holds it


def page_data(coordinator: Coordinator) -> tuple[list[dict[str, Any]], HeadHistory]:
    """Each model with the versions worth showing (the newest few, then the evaluated, promoted,
    restored or noted ones: those worth promoting), and the head's history (what a rollback undoes)."""
    listed = []
    for info in coordinator.catalog.list():
        accuracy = {e.version: e.accuracy for e in coordinator.store.evaluations(info.model_id)}
        retained = coordinator.catalog.versions(info.model_id)[::-1]
        shown = [
            (r, accuracy.get(r.version))
            for i, r in enumerate(retained)
            if i < NEWEST_VERSIONS or r.version in accuracy or r.note or r.origin in ("promotion", "rollback")
        ]
        listed.append({"info": info, "retained": len(retained), "versions": shown[:MAX_VERSIONS]})
    return listed, head_history(coordinator.store)


async def note_of(request: Request) -> str | None:
    """The form's optional ``note`` (the core checks it: server/core/lineage.py clean_note)."""
    value = (await request.form()).get("note")
    return value if isinstance(value, str) else None


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
    note = await note_of(request)
    try:
        head = await run_in_threadpool(
            lambda: coordinator.promote(model_id, version, actor=session.username, note=note)
        )
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
    note = await note_of(request)
    try:
        head = await run_in_threadpool(lambda: coordinator.rollback(actor=session.username, note=note))
    except CoordinatorError as exc:
        return back(error=str(exc))
    last = (await run_in_threadpool(head_history, coordinator.store)).last
    restored = last.source_version if last is not None else None  # the version whose parameters came back
    after = {"model_id": head[0], "version": head[1], "params_of": restored}
    await audit(request, session, "rolled_back", old=before, new=after)
    return back(f"rolled back: {head[0]} trains from version {head[1]}")


@router.post("/{model_id}/versions/{version}/note", include_in_schema=False)
async def set_note(request: Request, session: CheckedSession, model_id: str, version: int) -> Response:
    """Set or clear (empty) a version's note; the core audits the change (old and new note)."""
    coordinator = coordinator_of(request)
    text = await note_of(request)
    try:
        await run_in_threadpool(lambda: coordinator.annotate(model_id, version, text, actor=session.username))
    except CoordinatorError as exc:
        return back(error=str(exc))
    return back(f"note of version {version} of {model_id} saved")


async def download(read: Callable[[], tuple[str, bytes]]) -> Response:
    """``read()``'s (filename, bytes) as an attachment; 404 when the core does not have them (410 past
    retention)."""
    try:
        filename, data = await run_in_threadpool(read)
    except Gone as exc:
        raise HTTPException(status.HTTP_410_GONE, str(exc)) from exc
    except CoordinatorError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(data, media_type="application/octet-stream", headers=headers)


@router.get("/{model_id}/{which}.onnx", include_in_schema=False)
async def graph(
    request: Request,
    session: Session,
    model_id: str,
    which: str,
    version: int | None = Query(None, ge=0, le=MAX_INT),
) -> Response:
    """``infer``: the model to ship in an app, one runnable ONNX file with ``version``'s weights inside
    (the head's by default), as the API's ``inference.onnx`` (the bare inference graph takes the
    weights as inputs); ``train``: the gradient graph devices run."""
    coordinator = coordinator_of(request)
    catalog = coordinator.catalog

    def read() -> tuple[str, bytes]:
        if which == "infer":
            exported, data, _ = export_inference(catalog, model_id, version, coordinator.snapshot())
            return f"{model_id}-v{exported}.onnx", data
        return f"{model_id}-{which}.onnx", catalog.graph(model_id, which)

    return await download(read)


@router.get("/{model_id}/versions/{version}.bin", include_in_schema=False)
async def params(request: Request, session: Session, model_id: str, version: int) -> Response:
    """A version's parameters: little-endian float32, in the manifest's order."""
    catalog = coordinator_of(request).catalog
    return await download(lambda: (f"{model_id}-v{version}.bin", catalog.params_bytes(model_id, version)))
