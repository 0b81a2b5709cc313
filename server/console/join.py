"""The "Join a phone" page (/admin/join): join codes, each shown once as a QR code a phone scans.

A join code is an enrollment key that expires (server/core/join_codes.py); its QR code holds
``<public URL>/device/#join=<code>`` (server/join_links.py), rendered here as inline SVG by segno. The
code and the QR code are in the answer to the POST only: the audit log records the key's id, lifetime
and quota, never the code.
"""

from __future__ import annotations

from typing import Any

import segno
from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from markupsafe import Markup

from server.console.actions import back, revoke_stored_key
from server.console.web import CheckedSession, Session, audit, console_state, coordinator_of, render
from server.core.devices import DeviceRegistry
from server.core.errors import InvalidInput
from server.core.join_codes import DEFAULT_DEVICES, DEFAULT_MINUTES, MAX_DEVICES, MAX_MINUTES, MIN_MINUTES
from server.core.ports import EnrollmentKey
from server.join_links import installable, join_url, loopback, public_base

router = APIRouter()
LISTED = 30  # the newest join codes the page lists (older ones: the devices page's key filter)


@router.get("/join", include_in_schema=False)
async def join_page(request: Request, session: Session, msg: str | None = None) -> Response:
    return await render_join(request, msg=msg)


@router.post("/join", include_in_schema=False)
async def create_join_code(request: Request, session: CheckedSession) -> Response:
    form = await request.form()
    minutes, devices = _whole(form, "minutes", DEFAULT_MINUTES), _whole(form, "max_devices", DEFAULT_DEVICES)
    try:
        if minutes is None or devices is None:
            raise InvalidInput("the lifetime and the quota are whole numbers (minutes, devices)")
        key, code = await run_in_threadpool(
            lambda: coordinator_of(request).devices.create_join_code(
                minutes, actor=session.username, max_devices=devices
            )
        )
    except InvalidInput as exc:  # out of bounds (server/core/join_codes.py): the form again, with why
        refused = status.HTTP_422_UNPROCESSABLE_CONTENT
        return await render_join(request, refused, errors={"form": str(exc)}, submitted=form)
    detail = {"key_id": key.key_id, "minutes": minutes, "max_devices": devices}  # never the code
    await audit(request, session, "join_code_created", **detail)
    url = join_url(_base(request), code)
    return await render_join(request, new_code={"key": key, "code": code, "url": url, "qr": qr_svg(url)})


@router.post("/join/{key_id}/revoke", include_in_schema=False)
async def revoke_join_code(request: Request, session: CheckedSession, key_id: str) -> Response:
    """The settings page's key revocation, back to this page."""
    await revoke_stored_key(request, session, key_id)
    return back("/admin/join", f"join code {key_id} revoked: it enrolls no more phones")


async def render_join(request: Request, status_code: int = 200, **context: Any) -> Response:
    coordinator = coordinator_of(request)
    now = coordinator.clock()
    rows = await run_in_threadpool(join_rows, coordinator.devices, now)
    base = _base(request)
    return render(
        request, "join.html", status_code, codes=rows, now=now, base=base,
        configured=console_state(request).settings.public_url is not None,
        loopback=loopback(base), installable=installable(base),
        minutes=(MIN_MINUTES, MAX_MINUTES, DEFAULT_MINUTES), devices=(1, MAX_DEVICES, DEFAULT_DEVICES),
        **context,
    )  # fmt: skip


def join_rows(devices: DeviceRegistry, now: float) -> list[dict[str, Any]]:
    """The newest join codes (keys that expire), newest first, with their state and devices enrolled."""
    counts = devices.devices_per_key()
    codes = [k for k in devices.enrollment_keys() if k.expires_at is not None]
    codes.sort(key=lambda k: k.created_at, reverse=True)
    return [{"key": k, "enrolled": counts.get(k.key_id, 0), "state": _state(k, now)} for k in codes[:LISTED]]


def _state(key: EnrollmentKey, now: float) -> str:
    if key.revoked_at is not None:
        return "revoked"
    return "expired" if key.expired(now) else "live"


def qr_svg(text: str) -> Markup:
    """``text`` as an inline SVG QR code (error correction M: a phone reads it off a screen at an angle)."""
    qr = segno.make(text, error="m", micro=False)
    svg = qr.svg_inline(
        scale=6, border=4, dark="#000", light="#fff", svgclass="qr-code", title="Join code", omitsize=True
    )  # a viewBox: the page's CSS sizes it
    return Markup(svg)  # segno's own SVG of our URL: no markup of anyone else


def _base(request: Request) -> str:
    return public_base(console_state(request).settings.public_url, str(request.base_url))


def _whole(form: Any, name: str, default: int) -> int | None:
    """A form's whole number (``default`` when left empty; None when it is not one)."""
    text = str(form.get(name) or "").strip()
    if not text:
        return default
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None
