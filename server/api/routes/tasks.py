"""Learning tasks: ask for one, push its gradient back (raw float32/float16 body + JSON meta header)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, replace

import numpy as np
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from fleet_protocol import PushOutcome, Rejection, TaskGrant, WireError, decode_tensor, push_digest
from server.api.deps import AuthenticatedDevice, CoordinatorDep, LimitedDevice
from server.api.metrics import Metrics
from server.api.schemas import ResultMeta, TaskIn
from server.core.errors import StorageUnavailable
from server.core.journal import Ticket
from server.core.types import TaskRequest, TaskResult

router = APIRouter(prefix="/tasks", tags=["tasks"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskGrant,
    responses={503: {"model": Rejection}, 410: {"model": Rejection}, 429: {}},
)
async def request_task(
    body: TaskIn, device: LimitedDevice, coordinator: CoordinatorDep, request: Request
) -> TaskGrant | JSONResponse:
    metrics: Metrics = request.app.state.metrics
    started = time.perf_counter()
    task_request = TaskRequest(
        device=device,
        features=body.features.model_dump(),
        label_counts=np.asarray(body.label_counts, np.int64),
    )
    answer = coordinator.request_task(task_request)  # memory only (the journal writes later): no thread
    metrics.task_seconds.observe(time.perf_counter() - started)
    if isinstance(answer, Rejection):
        metrics.tasks_rejected.labels(answer.reason).inc()
        code = status.HTTP_410_GONE if answer.finished else status.HTTP_503_SERVICE_UNAVAILABLE
        return JSONResponse(
            asdict(answer),
            status_code=code,
            headers={"Retry-After": str(max(1, round(answer.retry_after)))},
        )
    metrics.tasks_granted.inc()
    metrics.batch_size.observe(answer.batch_size)
    base = f"/v1/models/{answer.model_id}"
    return replace(
        answer,
        params_url=f"{base}/versions/{answer.version}/params",
        manifest_url=f"{base}/manifest",
        train_graph_url=f"{base}/graphs/train.onnx",
    )


async def durable(ticket: Ticket | None, timeout: float = 60.0) -> None:
    """Wait, without holding a thread, until the journal has committed the push the ticket stands for."""
    if ticket is None:
        return
    loop = asyncio.get_running_loop()
    committed = loop.create_future()

    def settle() -> None:
        if not committed.done():
            committed.set_result(None)

    ticket.on_release(lambda: loop.call_soon_threadsafe(settle))
    try:
        await asyncio.wait_for(committed, timeout)
    except TimeoutError as exc:
        raise StorageUnavailable("the push was not committed in time") from exc
    if ticket.error is not None:
        raise ticket.error


META_HEADER_LOC = ("header", "Fleet-Meta")
META_PART_LOC = ("body", "meta")


def _missing(loc: tuple[str, ...], msg: str) -> RequestValidationError:
    """A missing piece of a push, in FastAPI's validation-error shape (one error shape for every 422
    about the request's form; the domain refusals keep a sentence)."""
    return RequestValidationError([{"type": "missing", "loc": loc, "msg": msg, "input": None}])


def parse_meta(meta_bytes: bytes, loc: tuple[str, ...]) -> ResultMeta:
    """The push's meta, or a 422 whose ``detail`` lists the errors with ``loc`` starting at the header
    (raw push) or at the multipart part: the same ``{"loc", "msg", "type"}`` list as a JSON body's."""
    try:
        data = json.loads(meta_bytes)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": loc, "msg": f"meta is not valid JSON: {exc}", "input": None}]
        ) from exc
    try:
        return ResultMeta.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError([{**error, "loc": (*loc, *error["loc"])} for error in errors]) from exc


async def _read_push(request: Request) -> tuple[bytes, bytes, tuple[str, ...]]:
    """(meta JSON, gradient bytes, where the meta came from) of a push: a raw body with the meta in the
    ``Fleet-Meta`` header (what the device client sends: nothing to parse), or multipart/form-data with
    parts ``meta`` + ``gradient``."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/octet-stream"):
        meta = request.headers.get("fleet-meta")
        if meta is None:
            raise _missing(META_HEADER_LOC, "the Fleet-Meta header is missing")
        return meta.encode("latin-1"), await request.body(), META_HEADER_LOC
    if not content_type.startswith("multipart/form-data"):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            "send application/octet-stream with a Fleet-Meta header, "
            "or multipart/form-data (meta + gradient)",
        )
    try:
        form = await request.form(max_files=2, max_fields=2, max_part_size=request.app.state.max_body_bytes)
    except Exception as exc:  # malformed multipart: the parser's own message is the useful part
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"malformed multipart body: {exc}"
        ) from exc
    try:
        meta = await _part_bytes(form.get("meta"), "meta")
        return meta, await _part_bytes(form.get("gradient"), "gradient"), META_PART_LOC
    finally:
        await form.close()


async def _part_bytes(value: UploadFile | str | None, name: str) -> bytes:
    if value is None:
        raise _missing(("body", name), f"multipart part {name!r} is missing")
    return await value.read() if isinstance(value, UploadFile) else value.encode()


@router.post("/{task_id}/result", response_model=PushOutcome)
async def push_result(
    task_id: str, request: Request, device: AuthenticatedDevice, coordinator: CoordinatorDep
) -> PushOutcome:
    metrics: Metrics = request.app.state.metrics
    started = time.perf_counter()
    meta_bytes, gradient_bytes, meta_loc = await _read_push(request)
    meta = parse_meta(meta_bytes, meta_loc)
    try:
        gradient = decode_tensor(gradient_bytes, meta.encoding)
    except WireError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"gradient: {exc}") from exc
    result = TaskResult(
        label_counts=np.asarray(meta.label_counts, dtype=np.int64),
        loss=meta.loss,
        compute_time_ms=meta.compute_time_ms,
        energy=meta.energy,
        batch_size=meta.batch_size,
        gradient=gradient,
        digest=push_digest(meta_bytes, gradient_bytes),
    )
    if not coordinator.knows(task_id):  # a lease from before a restart: read storage off the event loop
        await run_in_threadpool(coordinator.recall, task_id)
    outcome, ticket = coordinator.submit_nowait(device, task_id, result)  # CPU only, under the core's lock
    await durable(ticket)
    if not outcome.duplicate:
        metrics.gradients.inc()
        metrics.staleness.observe(outcome.staleness)
        metrics.weight.observe(outcome.weight)
        if outcome.applied:
            metrics.updates.inc()
        metrics.version.set(outcome.version)
    metrics.push_seconds.observe(time.perf_counter() - started)
    return outcome
