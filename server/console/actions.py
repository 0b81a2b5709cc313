"""State-changing console requests: training status, settings, enrollment keys, devices.

Each one needs the session's CSRF token, goes through the core like the REST API does, and writes an
audit entry (who, when, what, old → new). A form answers with a redirect back to its page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from server.compose import apply_settings
from server.console.pages import render_settings
from server.console.web import CheckedSession, audit, console_state, coordinator_of
from server.core.errors import CoordinatorError
from server.settings import LIVE_SETTINGS, with_overrides

router = APIRouter()
SETTABLE = {name for names in LIVE_SETTINGS.values() for name in names}


def back(path: str, msg: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?msg={quote(msg)}", status.HTTP_303_SEE_OTHER)


@router.post("/training/{action}", include_in_schema=False)
async def training(request: Request, session: CheckedSession, action: str) -> Response:
    """pause, resume or stop (finish now: devices are told training finished)."""
    coordinator = coordinator_of(request)
    run = coordinator.run
    if run is None:
        raise HTTPException(status.HTTP_409_CONFLICT, "no model is training")
    who = session.username  # the core's status events are the audit entries (actor, old → new)
    if action == "pause":
        await run_in_threadpool(lambda: coordinator.pause(actor=who))
    elif action == "resume":
        await run_in_threadpool(lambda: coordinator.resume(actor=who))
    elif action == "stop":
        await run_in_threadpool(
            lambda: coordinator.set_stop(target_accuracy=None, max_versions=run.version, actor=who)
        )
    else:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no training action {action!r}")
    return back("/admin", f"training is {run.status}")


def _form_values(form: Any, names: set[str], fields: dict[str, Any]) -> dict[str, Any]:
    """The submitted settings as raw values: an empty field of an optional setting means None; an
    unchecked checkbox (a bool not in the form, but announced by its hidden marker) means False."""
    values: dict[str, Any] = {}
    for name in names:
        annotation = fields[name].annotation
        if annotation is bool:
            if f"present:{name}" in form:
                values[name] = name in form and form.get(name) not in ("", "false", "off")
            continue
        if name not in form:
            continue
        raw = str(form.get(name)).strip()
        values[name] = None if raw == "" and "None" in str(annotation) else raw
    return values


@router.post("/settings", include_in_schema=False)
async def change_settings(request: Request, session: CheckedSession) -> Response:
    console = console_state(request)
    old = console.settings
    form = await request.form()
    fields = type(old).model_fields
    submitted = _form_values(form, SETTABLE, fields)
    try:
        new = with_overrides(old, submitted)
    except ValidationError as exc:
        errors = {".".join(str(p) for p in e["loc"]): e["msg"] for e in exc.errors()}
        return await render_settings(
            request, status.HTTP_422_UNPROCESSABLE_CONTENT, errors=errors, submitted=form
        )
    except ValueError as exc:
        return await render_settings(
            request, status.HTTP_422_UNPROCESSABLE_CONTENT, errors={"form": str(exc)}, submitted=form
        )
    changed = {n: (getattr(old, n), getattr(new, n)) for n in SETTABLE if getattr(old, n) != getattr(new, n)}
    if not changed:
        return back("/admin/settings", "nothing changed")
    coordinator = coordinator_of(request)
    await run_in_threadpool(apply_settings, coordinator, old, new)
    api = request.app.state
    api.rate_limiter.rate, api.rate_limiter.burst = new.rate_limit_per_second, new.rate_limit_burst
    api.enroll_limiter.rate, api.enroll_limiter.burst = new.enroll_rate_per_second, new.enroll_burst
    console.settings = api.settings = new
    values = {name: after for name, (_, after) in changed.items()}
    await run_in_threadpool(
        console.store.save_overrides, values, actor=session.username, at=coordinator.clock()
    )
    await audit(
        request,
        session,
        "settings_changed",
        changes={n: {"old": a, "new": b} for n, (a, b) in changed.items()},
    )
    return back("/admin/settings", "saved: " + ", ".join(sorted(changed)))


@router.post("/keys", include_in_schema=False)
async def create_key(request: Request, session: CheckedSession) -> Response:
    form = await request.form()
    name = str(form.get("name", "")).strip()[:120] or "unnamed"
    key, secret = await run_in_threadpool(
        lambda: coordinator_of(request).devices.create_enrollment_key(name, actor=session.username)
    )
    await audit(request, session, "enrollment_key_created", key_id=key.key_id, name=name)
    return await render_settings(request, new_key=(key, secret))


@router.post("/keys/{key_id}/revoke", include_in_schema=False)
async def revoke_key(request: Request, session: CheckedSession, key_id: str) -> Response:
    try:
        await run_in_threadpool(
            lambda: coordinator_of(request).devices.revoke_enrollment_key(key_id, actor=session.username)
        )
    except CoordinatorError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    await audit(request, session, "enrollment_key_revoked", key_id=key_id)
    return back("/admin/settings", f"enrollment key {key_id} revoked")


@router.post("/devices/{device_id}/revoke", include_in_schema=False)
async def revoke_device(request: Request, session: CheckedSession, device_id: str) -> Response:
    try:
        await run_in_threadpool(
            lambda: coordinator_of(request).revoke_device(device_id, actor=session.username)
        )
    except CoordinatorError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    await audit(request, session, "device_revoked", device_id=device_id)
    return back("/admin/devices", f"device {device_id} revoked: its token no longer works")
