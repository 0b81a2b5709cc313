"""Models: list them, pull a version's parameters (immutable, cacheable), graphs, inference export."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Header, Path, Query, Response
from fastapi.concurrency import run_in_threadpool

from server.api.deps import CoordinatorDep
from server.api.errors import NOT_FOUND, answer
from server.api.params import ModelId
from server.api.schemas import MAX_VERSION, ManifestOut, ModelOut, VersionOut
from server.core.catalog import ModelInfo
from server.core.inference_export import export_inference, served_params
from server.core.types import Snapshot

router = APIRouter(prefix="/models", tags=["models"])
OCTET = "application/octet-stream"
IMMUTABLE = "public, max-age=31536000, immutable"
CACHE_CONTROL = {"Cache-Control": {"description": IMMUTABLE, "schema": {"type": "string"}}}
ETAG = {"ETag": {"description": '"{model_id}:{version}:{encoding}"', "schema": {"type": "string"}}}
GONE = {410: answer("the version fell out of the retention window (FLEET_VERSION_RETENTION)")}


def binary(description: str, headers: dict[str, object]) -> dict[int | str, dict[str, object]]:
    """A 200 whose body is raw bytes (``response_class=Response`` keeps FastAPI from adding JSON)."""
    content = {OCTET: {"schema": {"type": "string", "format": "binary"}}}
    return {200: {"description": description, "content": content, "headers": headers}}


def model_out(info: ModelInfo, *, dp: bool = False) -> ModelOut:
    """A model as served; ``dp``: the coordinator runs DP, so a device knows before its first task request
    that it must send no label counts and a bucketed N (client/_dp_wire.py)."""
    return ModelOut(**{**info.__dict__, "input_shape": list(info.input_shape), "dp": dp})


@router.get("", response_model=list[ModelOut])
def list_models(coordinator: CoordinatorDep) -> list[ModelOut]:
    dp = coordinator.privacy_policy is not None
    return [model_out(i, dp=dp) for i in coordinator.catalog.list()]


@router.get("/active", response_model=ModelOut, responses={404: answer("no model is active")})
def active_model(coordinator: CoordinatorDep) -> ModelOut:
    return model_out(coordinator.catalog.active_info(), dp=coordinator.privacy_policy is not None)


@router.get("/{model_id}", response_model=ModelOut, responses=NOT_FOUND)
def get_model(model_id: ModelId, coordinator: CoordinatorDep) -> ModelOut:
    return model_out(coordinator.catalog.info(model_id), dp=coordinator.privacy_policy is not None)


@router.get(
    "/{model_id}/manifest",
    responses={
        200: {"model": ManifestOut, "description": "the model's manifest", "headers": CACHE_CONTROL},
        **NOT_FOUND,
    },
)
def manifest(model_id: ModelId, coordinator: CoordinatorDep) -> Response:
    return Response(
        coordinator.catalog.record(model_id).manifest_json,
        media_type="application/json",
        headers={"Cache-Control": IMMUTABLE},
    )


@router.get(
    "/{model_id}/graphs/{graph}.onnx",
    response_class=Response,
    responses={
        **binary("the ONNX graph", CACHE_CONTROL),
        404: answer("no such model, not train/infer/dp, or (dp) the model has no DP-SGD graph"),
    },
)
def graph(
    model_id: ModelId,
    coordinator: CoordinatorDep,
    graph: str = Path(
        description="train, infer or dp (the per-example-clipped DP-SGD graph; 404 if the model has none)",
        examples=["train", "infer", "dp"],
    ),
) -> Response:
    data = coordinator.catalog.graph(model_id, graph)
    return Response(data, media_type=OCTET, headers={"Cache-Control": IMMUTABLE})


@router.get("/{model_id}/versions", response_model=list[VersionOut], responses=NOT_FOUND)
def versions(model_id: ModelId, coordinator: CoordinatorDep) -> list[VersionOut]:
    """The retained versions, oldest first, each with its lineage (where it came from) and note."""
    return [VersionOut(**r.__dict__) for r in coordinator.catalog.versions(model_id)]


@router.get(
    "/{model_id}/versions/{version}/params",
    response_class=Response,
    responses={
        **binary(
            "the parameters, raw little-endian float32 (or float16) in manifest order",
            {**ETAG, **CACHE_CONTROL},
        ),
        304: {"description": "If-None-Match matched the ETag: not modified", "headers": ETAG},
        **NOT_FOUND,
        **GONE,
    },
)
async def params(
    model_id: ModelId,
    version: Annotated[int, Path(ge=0, le=MAX_VERSION)],
    coordinator: CoordinatorDep,
    if_none_match: str | None = Header(None),
    encoding: Literal["float32", "float16"] = Query("float32"),
) -> Response:
    """Little-endian float32 parameters, or float16 (half the bytes) with ``?encoding=float16``.

    Every task pulls: recent versions are served from memory on the event loop, older ones from the
    database in the thread pool."""
    etag = f'"{model_id}:{version}:{encoding}"'
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE}
    if if_none_match == etag:
        await run_in_threadpool(coordinator.catalog.record, model_id)
        return Response(status_code=304, headers=headers)
    data = coordinator.catalog.cached_params(model_id, version)
    if data is None:
        data = await run_in_threadpool(coordinator.catalog.params_bytes, model_id, version)
    if encoding == "float16":
        data = np.frombuffer(data, dtype="<f4").astype("<f2").tobytes()
    return Response(data, media_type=OCTET, headers=headers)


def cache_control(version: int, averaged: bool, snapshot: Snapshot | None) -> str:
    """The head's average changes with the next version unless it is evaluated: not cached. A kept
    average and a version as trained never change."""
    live = averaged and snapshot is not None and snapshot.version == version
    return "no-cache" if live else IMMUTABLE


SERVED_HEADERS = {
    **CACHE_CONTROL,
    "Fleet-Version": {"description": "the version served", "schema": {"type": "integer"}},
    "Fleet-Served": {"description": "average (the strategy's) or trained", "schema": {"type": "string"}},
}


@router.get(
    "/{model_id}/served",
    response_class=Response,
    responses={
        **binary("the parameters served, raw little-endian float32 in manifest order", SERVED_HEADERS),
        **NOT_FOUND,
        **GONE,
    },
)
async def served(
    model_id: ModelId, coordinator: CoordinatorDep, version: int | None = Query(None, ge=0, le=MAX_VERSION)
) -> Response:
    """The parameters of the model served at ``version`` (default: the newest), what *Try the model* runs:
    with a ``serving-average`` strategy the average of the last versions, not the version's own."""
    snapshot = await run_in_threadpool(coordinator.snapshot)  # a copy, under the coordinator's lock
    version, params, averaged = await run_in_threadpool(
        served_params, coordinator.catalog, model_id, version, snapshot
    )
    headers = {
        "Fleet-Version": str(version),
        "Fleet-Served": "average" if averaged else "trained",
        "Cache-Control": cache_control(version, averaged, snapshot),
    }
    return Response(np.asarray(params, dtype="<f4").tobytes(), media_type=OCTET, headers=headers)


@router.get(
    "/{model_id}/inference.onnx",
    response_class=Response,
    responses={
        **binary(
            "one ONNX file with the version's weights inside",
            {**CACHE_CONTROL, "Content-Disposition": {"schema": {"type": "string"}}},
        ),
        **NOT_FOUND,
        **GONE,
    },
)
async def inference_model(
    model_id: ModelId, coordinator: CoordinatorDep, version: int | None = Query(None, ge=0, le=MAX_VERSION)
) -> Response:
    """The model at ``version`` (default: the newest) as one ONNX file with its weights inside. The newest
    is the model served: with a ``serving-average`` strategy (the default's) the average of the last
    versions, which the next update changes, so it is not cached (``no-cache``); an evaluated version
    keeps the average it was scored as, any other older version is exported as trained.

    Every storage read and the baking run in the thread pool: nothing here blocks the event loop."""
    snapshot = await run_in_threadpool(coordinator.snapshot)
    version, data, averaged = await run_in_threadpool(
        export_inference, coordinator.catalog, model_id, version, snapshot
    )
    return Response(
        data,
        media_type=OCTET,
        headers={
            "Content-Disposition": f'attachment; filename="{model_id}-v{version}.onnx"',
            "Cache-Control": cache_control(version, averaged, snapshot),
        },
    )
