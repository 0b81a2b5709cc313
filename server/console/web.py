"""What every console route shares: the logged-in session, the CSRF check, templates, the audit call.

Anonymous requests are sent to the login page (303); a state-changing request must carry the
session's CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``) or it is refused (403).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from anyio import CapacityLimiter
from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.templating import Jinja2Templates

from server.console import labels
from server.console.accounts import Accounts, ConsoleSession
from server.console.figures import iso
from server.core.coordinator import Coordinator
from server.ratelimit import LoginThrottle
from server.settings import Settings
from server.store.admin import AdminStore

COOKIE = "fleet_session"
# the pages that draw charts: only they load plotly.js (1.2 MB), the others stay a few kB
CHART_PAGES = frozenset({"overview", "learning", "devices", "device_model", "privacy"})
LOGIN_CSRF_COOKIE = "fleet_login_csrf"
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.filters["iso"] = iso
# one path segment of a URL: Jinja's urlencode keeps "/", and a device model named "A/B" must stay one segment
templates.env.filters["segment"] = lambda value: quote(str(value), safe="")
labels.install(templates.env)  # |label, |number, |bytes, |ms, |features: words and units, not variables


@dataclass
class ConsoleState:
    """The console's parts, kept on ``app.state.console``; the settings are the live ones."""

    accounts: Accounts
    store: AdminStore
    settings: Settings
    login_throttle: LoginThrottle
    # argon2 runs in threads of its own (at most this many at once, 64 MiB each): a login neither blocks
    # the event loop nor queues behind the device requests that fill the default thread pool
    hashing: CapacityLimiter = field(default_factory=lambda: CapacityLimiter(2))


class LoginRequired(Exception):
    """Raised by the session dependency; answered with a redirect to the login page."""

    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


def console_state(request: Request) -> ConsoleState:
    return request.app.state.console


def coordinator_of(request: Request) -> Coordinator:
    return request.app.state.coordinator


async def current_session(request: Request) -> ConsoleSession:
    cookie = request.cookies.get(COOKIE)
    session = await run_in_threadpool(console_state(request).accounts.session, cookie) if cookie else None
    if session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    request.state.session = session
    return session


async def checked_session(
    request: Request, session: Annotated[ConsoleSession, Depends(current_session)]
) -> ConsoleSession:
    """The session of a state-changing request whose CSRF token matches (403 otherwise)."""
    token = request.headers.get("x-csrf-token")
    if token is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        form = await request.form(max_files=1, max_part_size=request.app.state.max_body_bytes)
        value = form.get("csrf_token")
        token = value if isinstance(value, str) else None
    if not token or not secrets.compare_digest(token.encode(), session.csrf_token.encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "missing or wrong CSRF token")
    return session


Session = Annotated[ConsoleSession, Depends(current_session)]
CheckedSession = Annotated[ConsoleSession, Depends(checked_session)]


def safe_next(path: str | None) -> str:
    """Only a path inside the console is a place to go back to after login (no open redirect)."""
    if path and path.startswith("/admin") and not path.startswith("//") and "\\" not in path:
        return path
    return "/admin"


def login_url(next_path: str) -> str:
    return "/admin/login?next=" + quote(safe_next(next_path), safe="/")


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Any:
    session: ConsoleSession | None = getattr(request.state, "session", None)
    context.setdefault("page", template.removesuffix(".html"))
    context.setdefault("charts", context["page"] in CHART_PAGES)
    return templates.TemplateResponse(
        request,
        template,
        {"session": session, "csrf_token": session.csrf_token if session else "", **context},
        status_code=status_code,
    )


async def audit(request: Request, session: ConsoleSession, action: str, **detail: Any) -> None:
    """One audit entry: who, when, what (with old → new where something changed)."""
    store = console_state(request).store
    await run_in_threadpool(store.audit, actor=session.username, action=action, detail=detail, at=time.time())
