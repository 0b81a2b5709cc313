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
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from server.compose import apply_settings
from server.console.pages import render_settings
from server.console.web import CheckedSession, Session, audit, console_state, coordinator_of
from server.core.errors import CoordinatorError
from server.ratelimit import apply_limits
from server.settings import LIVE_SETTINGS, Settings, strategy_keys, with_overrides
from server.settings_enrollment import MAX_QUOTA
from server.strategies import STRATEGIES, WRAPPERS

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


def _form_values(form: Any, names: dict[str, str], fields: dict[str, Any]) -> dict[str, Any]:
    """The submitted settings as raw values, by setting name (``names``: form name → setting name): an
    empty field of an optional setting means None; an unchecked checkbox (a bool not in the form, but
    announced by its hidden marker) means False."""
    values: dict[str, Any] = {}
    for form_name, name in names.items():
        annotation = fields[name].annotation
        if annotation is bool:
            if f"present:{form_name}" in form:
                values[name] = form_name in form and form.get(form_name) not in ("", "false", "off")
            continue
        if form_name not in form:
            continue
        raw = str(form.get(form_name)).strip()
        values[name] = None if raw == "" and "None" in str(annotation) else raw
    return values


def _strategy_values(form: Any, current: BaseModel) -> dict[str, Any] | None:
    """The submitted strategy settings (``strategy`` and ``strategy.<field>``, or the old flat field names):
    the chosen strategy's own fields only; another strategy than the running one keeps the fields the two
    share and starts from its defaults for the others (the running one's other fields, which the page
    posted, are dropped). A field the chosen strategy does not take is refused (ValueError). None when
    the form has no strategy fields."""
    name = str(form.get("strategy", current.name)).strip()  # type: ignore[attr-defined]
    cls = STRATEGIES.get(name)
    if cls is None:
        return {"name": name}  # refused by validation, with the registry's names in the message
    fields = cls.settings.model_fields
    foreign = {key for key in form if key in strategy_keys() and key not in fields}
    if name == current.name:  # type: ignore[attr-defined] # the page shows only the running one's fields
        foreign |= {key for key in form if key.startswith("strategy.") and key[9:] not in fields}
    if foreign:
        raise ValueError(f"not settings of strategy {name}: {', '.join(sorted(foreign))}")
    nested = {f"strategy.{key}": key for key in fields if key != "name"}
    flat = {key: key for key in fields if key != "name" and key in strategy_keys()}
    values = {**_form_values(form, flat, fields), **_form_values(form, nested, fields)}
    if "strategy" not in form and not values:
        return None
    kept = {key: value for key, value in current if key in fields and key != "name"}
    return {**kept, **values, "name": name}


def _wrapper_values(form: Any) -> list[dict[str, Any]] | None:
    """The submitted wrappers (``wrappers.<i>.name`` and fields, ``.remove``, ``wrappers.add``), in order;
    None when the form has none."""
    parts = [key.split(".") for key in form if key.startswith("wrappers.")]
    indices = sorted({int(p[1]) for p in parts if len(p) == 3 and p[1].isdigit()})
    if not indices and "wrappers.add" not in form:
        return None
    wrappers: list[dict[str, Any]] = []
    for i in indices:
        name = str(form.get(f"wrappers.{i}.name", ""))
        if form.get(f"wrappers.{i}.remove") in ("true", "on", "1"):
            continue
        cls = WRAPPERS.get(name)
        if cls is None:
            wrappers.append({"name": name})
            continue
        fields = cls.settings.model_fields
        names = {f"wrappers.{i}.{key}": key for key in fields if key != "name"}
        wrappers.append({"name": name, **_form_values(form, names, fields)})
    added = str(form.get("wrappers.add", "")).strip()
    if added:
        wrappers.append({"name": added})
    return wrappers


def _submitted(form: Any, current: Settings) -> dict[str, Any]:
    """The settings a form submits, for ``with_overrides``."""
    fields = type(current).model_fields
    plain = {name: name for name in SETTABLE - {"strategy", "wrappers"}}
    values = _form_values(form, plain, fields)
    strategy = _strategy_values(form, current.strategy)
    if strategy is not None:
        values["strategy"] = strategy
    wrappers = _wrapper_values(form)
    if wrappers is not None:
        values["wrappers"] = wrappers
    return values


def _error_key(loc: tuple[Any, ...]) -> str:
    """A validation error's location as the form field's name: the union's tag is left out
    (("strategy", "adasgd", "percentile") → "strategy.percentile", ("wrappers", 0, "kardam", "f") →
    "wrappers.0.f")."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["strategy"] and len(parts) > 2:
        parts = ["strategy", *parts[2:]]
    elif parts[:1] == ["wrappers"] and len(parts) > 3:
        parts = parts[:2] + parts[3:]
    return ".".join(parts) or "form"  # a rule over several settings (e.g. DP and the strategy) names none


@router.post("/settings", include_in_schema=False)
async def change_settings(request: Request, session: CheckedSession) -> Response:
    console = console_state(request)
    old = console.settings
    form = await request.form()
    try:
        new = with_overrides(old, _submitted(form, old))
    except ValidationError as exc:
        errors = {_error_key(tuple(e["loc"])): e["msg"] for e in exc.errors()}
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
    apply_limits(api, new)
    console.settings = api.settings = new
    values = {name: to_jsonable_python(after) for name, (_, after) in changed.items()}
    await run_in_threadpool(
        console.store.save_overrides, values, actor=session.username, at=coordinator.clock()
    )
    await audit(
        request,
        session,
        "settings_changed",
        changes={n: {"old": to_jsonable_python(a), "new": values[n]} for n, (a, _) in changed.items()},
    )
    return back("/admin/settings", "saved: " + ", ".join(sorted(changed)))


@router.post("/keys", include_in_schema=False)
async def create_key(request: Request, session: CheckedSession) -> Response:
    form = await request.form()
    name = str(form.get("name", "")).strip()[:120] or "unnamed"
    quota = _quota(str(form.get("max_devices", "")).strip())
    if isinstance(quota, str):
        return await render_settings(
            request, status.HTTP_422_UNPROCESSABLE_CONTENT, errors={"max_devices": quota}, submitted=form
        )
    key, secret = await run_in_threadpool(
        lambda: coordinator_of(request).devices.create_enrollment_key(
            name, actor=session.username, max_devices=quota
        )
    )
    await audit(request, session, "enrollment_key_created", key_id=key.key_id, name=name, max_devices=quota)
    return await render_settings(request, new_key=(key, secret))


def _quota(text: str) -> int | None | str:
    """A new key's quota from the form: a whole number within the settings' range, None when left empty
    (the default quota applies), or the error to show."""
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return f"the quota must be a whole number of devices, not {text[:40]!r}"
    if not 1 <= value <= MAX_QUOTA:
        return f"the quota must be between 1 and {MAX_QUOTA:,} devices"
    return value


@router.post("/keys/{key_id}/revoke", include_in_schema=False)
async def revoke_key(request: Request, session: CheckedSession, key_id: str) -> Response:
    await revoke_stored_key(request, session, key_id)
    return back("/admin/settings", f"enrollment key {key_id} revoked")


async def revoke_stored_key(request: Request, session: Session, key_id: str) -> None:
    """Revoke a stored enrollment key (a join code is one) as the signed-in user, audited; 404 if unknown."""
    try:
        await run_in_threadpool(
            lambda: coordinator_of(request).devices.revoke_enrollment_key(key_id, actor=session.username)
        )
    except CoordinatorError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    await audit(request, session, "enrollment_key_revoked", key_id=key_id)


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
