"""Login and logout. The login form has its own CSRF token (a double-submit cookie, no session yet);
attempts are rate-limited per client address, and wrong passwords make the next attempt wait longer and
longer per user at that address and per address (server/ratelimit.py LoginThrottle): never for a user
everywhere, so nobody can lock the admin out. Logins, failed logins and logouts are audited."""

from __future__ import annotations

import math
import secrets
import time
from typing import Annotated

import anyio
from fastapi import APIRouter, Form, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from server.console.web import (
    COOKIE,
    LOGIN_CSRF_COOKIE,
    CheckedSession,
    ConsoleState,
    console_state,
    render,
    safe_next,
)

router = APIRouter()


def _cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/admin",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _login_page(request: Request, next_path: str, error: str | None = None, code: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = render(request, "login.html", code, login_csrf=token, next=safe_next(next_path), error=error)
    _cookie(response, request, LOGIN_CSRF_COOKIE, token, 600)
    return response


@router.get("/login", include_in_schema=False)
async def login_form(request: Request, next: str = "/admin") -> Response:
    return _login_page(request, next)


@router.post("/login", include_in_schema=False)
async def login(
    request: Request,
    username: Annotated[str, Form(max_length=64)],
    password: Annotated[str, Form(max_length=1024)],
    csrf_token: Annotated[str, Form(max_length=128)] = "",
    next: Annotated[str, Form(max_length=2048)] = "/admin",
) -> Response:
    console = console_state(request)
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not secrets.compare_digest(expected.encode(), csrf_token.encode()):
        return _login_page(request, next, "The form expired: please try again.", status.HTTP_403_FORBIDDEN)
    address = request.client.host if request.client else "unknown"
    wait = console.login_throttle.wait(username, address)
    if wait > 0:
        response = _login_page(
            request, next, f"Too many attempts: wait {math.ceil(wait)} s.", status.HTTP_429_TOO_MANY_REQUESTS
        )
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    verify = console.accounts.verify
    if not await anyio.to_thread.run_sync(verify, username, password, limiter=console.hashing):
        console.login_throttle.failed(username, address)
        await _audit(console, username or "?", "login_failed", address, "a wrong username or password")
        return _login_page(request, next, "Wrong username or password.", status.HTTP_401_UNAUTHORIZED)
    console.login_throttle.succeeded(username, address)
    cookie, _ = await run_in_threadpool(console.accounts.open_session, username)
    await _audit(console, username, "login", address, f"{username} logged in")
    response = RedirectResponse(safe_next(next), status.HTTP_303_SEE_OTHER)
    _cookie(response, request, COOKIE, cookie, int(console.accounts.session_seconds))
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/admin")
    return response


@router.post("/logout", include_in_schema=False)
async def logout(request: Request, session: CheckedSession) -> Response:
    cookie = request.cookies.get(COOKIE, "")
    console = console_state(request)
    await run_in_threadpool(console.accounts.close_session, cookie)
    address = request.client.host if request.client else "unknown"
    await _audit(console, session.username, "logout", address, f"{session.username} logged out")
    response = RedirectResponse("/admin/login", status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE, path="/admin")
    return response


async def _audit(console: ConsoleState, actor: str, action: str, address: str, what: str) -> None:
    """An audit entry whose ``summary`` an operator reads as is ("alice logged in from 10.0.0.7")."""
    detail = {"address": address, "summary": f"{what} from {address}"}
    await run_in_threadpool(console.store.audit, actor=actor, action=action, detail=detail, at=time.time())
