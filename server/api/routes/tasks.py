"""Learning tasks: ask for one, push its gradient back (raw float32/float16 body + JSON meta header), or
give it back unrun with a reason (decline)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, replace

import numpy as np
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import Field, ValidationError
from starlette.datastructures import UploadFile

from fleet_protocol import PushOutcome, Rejection, TaskGrant, WireError, decode_tensor, push_digest
from server.api.deps import AuthenticatedDevice, LimitedDevice
from server.api.errors import DEVICE_AUTH, JSON_BODY, RATE_LIMITED, RETRY_AFTER, WITH_BODY, answer
from server.api.metrics import Metrics
from server.api.openapi import ref
from server.api.params import TaskId
from server.api.schemas import NO_NUL, Input, ResultMeta, TaskIn
from server.core.coordinator import Coordinator
from server.core.errors import StorageUnavailable
from server.core.journal import Ticket
from server.core.types import TaskRequest, TaskResult

router = APIRouter(prefix="/tasks", tags=["tasks"], responses={**DEVICE_AUTH, **WITH_BODY})

# the granted task's id is the push's path parameter (OpenAPI links: stateful clients and fuzzers follow it)
GRANT_LINKS = {
    201: {
        "links": {
            "PushResult": {"operationId": "push_result", "parameters": {"task_id": "$response.body#/task_id"}}
        }
    }
}
REJECTIONS = {
    503: answer("no task now: reason and retry_after say why and when to ask again", headers=RETRY_AFTER),
    410: answer('training finished (reason "training_finished"): stop asking', headers=RETRY_AFTER),
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskGrant,
    responses={**GRANT_LINKS, **REJECTIONS, **RATE_LIMITED, **JSON_BODY},
)
async def request_task(body: TaskIn, device: LimitedDevice, request: Request) -> TaskGrant | JSONResponse:
    # the coordinator and metrics from the app's state, not dependencies: each costs every request
    coordinator: Coordinator = request.app.state.coordinator
    metrics: Metrics = request.app.state.metrics
    started = time.perf_counter()
    task_request = TaskRequest(
        device=device,
        features=body.features.model_dump(),
        label_counts=None if body.label_counts is None else np.asarray(body.label_counts, np.int64),
        local_examples=body.local_examples,
    )
    # memory only (the journal writes later): no thread; a DP grant waits for its charge to be committed
    answer, ticket = coordinator.request_task_nowait(task_request)
    await durable(ticket)
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
    dp = answer.dp if answer.dp is None else {**answer.dp, "graph_url": f"{base}/graphs/dp.onnx"}
    return replace(
        answer,
        dp=dp,
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


BINARY = {"type": "string", "format": "binary"}
META_EXAMPLE = (
    '{"label_counts":[3,0,0,2,0,0,0,0,0,5],"loss":2.1,"compute_time_ms":84.0,"energy":null,"batch_size":10}'
)
# The route reads its body itself (a raw body costs nothing to parse), so its form is written out here.
PUSH_FORMS: dict[str, object] = {
    "parameters": [
        {
            "name": "Fleet-Meta",
            "in": "header",
            "required": False,
            "description": "Required with an application/octet-stream body (ignored with multipart): the "
            "ResultMeta as compact JSON. label_counts sums to batch_size, which is at most the granted one;"
            " under DP loss and label_counts are null and batch_size is the terms' expected_batch.",
            "schema": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": ref(ResultMeta),
            },
            "example": META_EXAMPLE,
        }
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/octet-stream": {
                "schema": {
                    **BINARY,
                    "description": "the gradient: num_params little-endian float32 values in manifest order "
                    '(float16 when the meta says "encoding": "float16"); the meta in the Fleet-Meta header',
                }
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["meta", "gradient"],
                    "properties": {"meta": ref(ResultMeta), "gradient": BINARY},
                },
                "encoding": {
                    "meta": {"contentType": "application/json"},
                    "gradient": {"contentType": "application/octet-stream"},
                },
            },
        },
    },
}
PUSH_REFUSALS = {
    403: answer("the task was granted to another device"),
    404: answer("no such task"),
    409: answer("the task was already answered with a different body"),
    410: answer("the task's lease expired, or its model is no longer training"),
    415: answer("neither application/octet-stream nor multipart/form-data"),
    422: answer(
        "a malformed meta, multipart body or gradient (detail is a list for the meta), or a push rule broken"
    ),
}


@router.post(
    "/{task_id}/result", response_model=PushOutcome, responses=PUSH_REFUSALS, openapi_extra=PUSH_FORMS
)
async def push_result(task_id: TaskId, request: Request, device: AuthenticatedDevice) -> PushOutcome:
    """The gradient of a granted task: a raw body with the meta in the Fleet-Meta header, or multipart."""
    coordinator: Coordinator = request.app.state.coordinator
    metrics: Metrics = request.app.state.metrics
    started = time.perf_counter()
    meta_bytes, gradient_bytes, meta_loc = await _read_push(request)
    meta = parse_meta(meta_bytes, meta_loc)
    try:
        gradient = decode_tensor(gradient_bytes, meta.encoding)
    except WireError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"gradient: {exc}") from exc
    result = TaskResult(
        label_counts=None if meta.label_counts is None else np.asarray(meta.label_counts, dtype=np.int64),
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


class DeclineIn(Input):
    """``fleet_protocol.TaskDecline``: why the device gives the task back unrun."""

    reason: str = Field(
        min_length=1, max_length=64, pattern=r"^[a-z0-9_]+$", examples=["privacy_terms_refused"]
    )
    detail: str = Field("", max_length=500, pattern=NO_NUL, description="a sentence for the operator")


DECLINE_REFUSALS = {
    403: answer("the task was granted to another device"),
    404: answer("no such task"),
    409: answer("the task was already answered"),
}


@router.post(
    "/{task_id}/decline",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={**DECLINE_REFUSALS, **JSON_BODY},
)
async def decline_task(
    task_id: TaskId, body: DeclineIn, request: Request, device: AuthenticatedDevice
) -> Response:
    """Give a granted task back unrun: the device cannot run its terms (issue 29). The lease ends (a late
    push for it is refused), the reason is counted (``declined_by_reason`` in the figures) and the first
    decline of a device for a reason in ten minutes is written to the audit log with its detail."""
    coordinator: Coordinator = request.app.state.coordinator
    if not coordinator.knows(task_id):  # granted before a restart, or by another API worker
        await run_in_threadpool(coordinator.recall, task_id)
    if coordinator.decline(device, task_id, reason=body.reason):
        detail = {
            "device_id": device.device_id,
            "task_id": task_id,
            "reason": body.reason,
            "detail": body.detail,
        }
        await run_in_threadpool(
            request.app.state.admin_store.audit,
            actor=f"device {device.device_id}",
            action="task_declined",
            detail=detail,
            at=coordinator.clock(),
        )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
