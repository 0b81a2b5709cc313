"""The served OpenAPI document: FastAPI's, with one error schema and the schemas that only hand-written
parts of it (``openapi_extra`` of the routes that read their body themselves) refer to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from server.api.errors import Error
from server.api.schemas import ResultMeta

REF = "#/components/schemas/{model}"
# FastAPI's own 422 schema: every reference to it becomes a reference to Error
DEFAULT_422 = ("HTTPValidationError", "ValidationError")
EXTRA_SCHEMAS: tuple[type[BaseModel], ...] = (ResultMeta,)


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _replace_refs(node: Any, old: str, new: str) -> Any:
    if isinstance(node, dict):
        if node.get("$ref") == old:
            return {**node, "$ref": new}
        return {key: _replace_refs(value, old, new) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace_refs(item, old, new) for item in node]
    return node


def finish(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with FastAPI's default 422 schema replaced by Error and the extra schemas added."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (Error, *EXTRA_SCHEMAS):
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas.setdefault(model.__name__, schema)
    document = _replace_refs(document, REF.format(model=DEFAULT_422[0]), REF.format(model=Error.__name__))
    for name in DEFAULT_422:
        document["components"]["schemas"].pop(name, None)
    return document


def install(app: FastAPI) -> None:
    """Serve ``finish(FastAPI's document)`` at /openapi.json (built once, on first use)."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if getattr(app.state, "openapi_finished", None) is None:
            app.state.openapi_finished = finish(build())
            app.openapi_schema = app.state.openapi_finished
        return app.state.openapi_finished

    app.openapi = openapi  # type: ignore[method-assign]
