"""The one error shape every error answer has, and the ``responses`` entries routes share to document it.

Answers come from FastAPI's validation handler (app.py: ``detail`` is a list), ``HTTPException``s and the
core's errors (``detail`` is a sentence), task rejections (plus ``reason`` and ``retry_after``) and the
body-size middleware (bodylimit.py). One schema covers them all, so a client needs one error parser.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ValidationIssue(BaseModel):
    """One problem with the request, in FastAPI's (pydantic's) validation-error form."""

    loc: list[str | int] = Field(
        description='where the value came from, e.g. ["body", "features", "temperature"] or '
        '["header", "Fleet-Meta", "loss"]'
    )
    msg: str
    type: str = Field(description='pydantic\'s error type, e.g. "missing", "greater_than", "json_invalid"')
    input: Any = Field(
        None,
        description='the rejected value; a non-finite number is echoed as "NaN", "Infinity", "-Infinity"',
    )
    ctx: dict[str, Any] | None = Field(None, description='the constraint that failed, e.g. {"le": 150}')


class Error(BaseModel):
    """Every error answer (4xx, and 503 on task requests and readiness)."""

    detail: str | list[ValidationIssue] = Field(
        description="a sentence, or one entry per problem for a request that does not match its schema"
    )
    reason: str | None = Field(
        None,
        description="task requests refused with 503/410: paused, small_batch, too_similar, no_model, "
        "training_finished, or a strategy's reason to wait (e.g. round_full); enrollments refused for "
        "good: enrollment_quota, attestation_refused, install_revoked (403), enrollment_code_expired "
        "(401); storage_unavailable on any route while the database cannot be used",
    )
    retry_after: float | None = Field(None, description="with reason: seconds before asking again")


def answer(description: str, *, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``responses`` entry answered with the error schema."""
    entry: dict[str, Any] = {"model": Error, "description": description}
    if headers:
        entry["headers"] = headers
    return entry


RETRY_AFTER = {
    "Retry-After": {"description": "whole seconds to wait before asking again", "schema": {"type": "integer"}}
}
WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}

# per dependency: who may call
DEVICE_AUTH = {401: answer("missing or unknown device token", headers=WWW_AUTHENTICATE)}
ADMIN_AUTH = {
    401: answer("missing admin token", headers=WWW_AUTHENTICATE),
    403: answer("a bearer token that is not the admin token"),
}
RATE_LIMITED = {429: answer("over the rate limit (see docs/protocol.md, Rate limits)", headers=RETRY_AFTER)}
# per request form
INVALID = {
    422: answer("the request does not match its schema (detail: a list), or breaks a rule (a sentence)")
}
WITH_BODY = {
    413: answer("the body exceeds FLEET_MAX_BODY_BYTES (checked before it is read)"),
    **INVALID,
}
# FastAPI answers 400 when a JSON body cannot even be decoded as text (JSON is UTF-8); bad JSON is a 422
JSON_BODY = {400: answer("the body is not UTF-8 text, so not JSON"), **WITH_BODY}
STORAGE_DOWN = {
    503: answer(
        "storage_unavailable: the database cannot be reached or a commit failed; nothing of the request "
        "was stored, send it again after Retry-After (docs/protocol.md, When the database fails)",
        headers=RETRY_AFTER,
    )
}
NOT_FOUND = {404: answer("no such model (or version)")}
NO_RUN = {404: answer("no model is training")}
