"""The admin web console at /admin: server-rendered pages, plotly charts served by the coordinator itself.

``install`` adds its routes to the API app (unless FLEET_CONSOLE=false); ``open_console`` builds its
state once storage is up. The console only reads the core's figures and calls the core's methods, so
when it fails, or is off, training goes on as before.
"""

from __future__ import annotations

import gzip
import logging
from functools import lru_cache
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.console import actions, auth, join, models, pages
from server.console.accounts import Accounts
from server.console.origin import SameOriginPosts
from server.console.web import ConsoleState, LoginRequired, login_url
from server.ratelimit import LoginThrottle
from server.settings import Settings
from server.store.admin import AdminStore

log = logging.getLogger("fleet.console")
STATIC = Path(__file__).parent / "static"
# plotly.js's "basic" partial bundle (scatter, bar, pie: every trace type charts.py draws), vendored from npm
# (plotly.js-basic-dist-min, MIT; its LICENSE beside it): 1.2 MB instead of the full bundle's 4.8 MB
PLOTLY_JS = STATIC / "plotly-basic.min.js"
# plotly.js sets inline styles and its SVG text; nothing is loaded from elsewhere
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


class SecurityHeaders:
    """Content-Security-Policy and friends on every /admin response (a pure ASGI wrapper: the device
    API's hot path is not touched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/admin"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cache-control", b"no-store")
                    if not scope["path"].startswith("/admin/static")
                    else (b"cache-control", b"public, max-age=86400"),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


@lru_cache(maxsize=1)
def _plotly_gzip() -> bytes:
    return gzip.compress(PLOTLY_JS.read_bytes(), 6)


def install(app: FastAPI) -> None:
    """Add the console's routes, static files and login redirect to ``app``."""

    @app.get("/admin/static/plotly-basic.min.js", include_in_schema=False)
    async def plotly_js(request: Request) -> Response:
        """plotly.js served by the coordinator (no CDN), gzipped once: the static mount would not."""
        headers = {"Vary": "Accept-Encoding"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return Response(_plotly_gzip(), media_type="text/javascript", headers=headers)
        return Response(PLOTLY_JS.read_bytes(), media_type="text/javascript", headers=headers)

    app.mount("/admin/static", StaticFiles(directory=STATIC), name="console-static")
    for router in (auth.router, pages.router, actions.router, models.router, join.router):
        app.include_router(router, prefix="/admin")

    @app.exception_handler(LoginRequired)
    async def to_login(request: Request, exc: LoginRequired) -> Response:
        if request.url.path.startswith(("/admin/data", "/admin/charts")):  # fetched by the page's script
            return Response('{"detail": "log in first"}', 401, media_type="application/json")
        return RedirectResponse(login_url(exc.next_path if request.method == "GET" else "/admin"), 303)

    app.add_middleware(SameOriginPosts)  # defence in depth beside the CSRF token (origin.py)
    app.add_middleware(SecurityHeaders)


def open_console(settings: Settings, store: AdminStore) -> ConsoleState:
    """The console's state; the first-run user is created from the settings when there is none."""
    accounts = Accounts(store, session_seconds=settings.console_session_hours * 3600)
    user, password = settings.console_user, settings.console_password
    if user and password and accounts.ensure_first_user(user, password.get_secret_value()):
        log.warning("created the first console user %r", user)
    throttle = LoginThrottle(
        rate=settings.login_rate_per_minute / 60,
        burst=settings.login_burst,
        free_failures=settings.login_free_failures,
        max_backoff=settings.login_backoff_max_seconds,
    )
    return ConsoleState(accounts=accounts, store=store, settings=settings, login_throttle=throttle)


__all__ = ["install", "open_console"]
