"""Login and logout. The login form has its own CSRF token (a double-submit cookie, no session yet);
attempts are rate-limited per client address and per username, right or wrong."""

from __future__ import annotations

import math
import secrets
import time
from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from server.console.web import COOKIE, LOGIN_CSRF_COOKIE, CheckedSession, console_state, render, safe_next

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
    wait = max(
        console.login_limiter.acquire(f"ip:{address}"), console.login_limiter.acquire(f"user:{username}")
    )
    if wait > 0:
        response = _login_page(
            request, next, f"Too many attempts: wait {math.ceil(wait)} s.", status.HTTP_429_TOO_MANY_REQUESTS
        )
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    if not await run_in_threadpool(console.accounts.verify, username, password):
        await run_in_threadpool(
            console.store.audit, actor=username or "?", action="login_failed", detail={"address": address},
            at=time.time(),
        )  # fmt: skip
        return _login_page(request, next, "Wrong username or password.", status.HTTP_401_UNAUTHORIZED)
    cookie, _ = await run_in_threadpool(console.accounts.open_session, username)
    response = RedirectResponse(safe_next(next), status.HTTP_303_SEE_OTHER)
    _cookie(response, request, COOKIE, cookie, int(console.accounts.session_seconds))
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/admin")
    return response


@router.post("/logout", include_in_schema=False)
async def logout(request: Request, session: CheckedSession) -> Response:
    cookie = request.cookies.get(COOKIE, "")
    await run_in_threadpool(console_state(request).accounts.close_session, cookie)
    response = RedirectResponse("/admin/login", status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE, path="/admin")
    return response
