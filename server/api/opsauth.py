"""The operations token (FLEET_OPS_TOKEN): when set, /metrics and the API documentation need it.

A pure ASGI guard rather than a route dependency: the documentation routes and their assets are
FastAPIOffline's own, and /metrics must stay reachable by a Prometheus scraper that holds only this token
(``authorization: {credentials: ...}`` or ``basic_auth: {password: ...}`` in its scrape config). HTTP
Basic is accepted so that a browser asks for it on /docs and sends it again for /openapi.json.
"""

from __future__ import annotations

import base64
import binascii
import secrets

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

GUARDED = ("/metrics", "/docs", "/redoc", "/openapi.json", "/docs-assets")


def guarded(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in GUARDED)


def presented(authorization: str) -> str | None:
    """The token in an ``Authorization`` header: a Bearer token, or the password of HTTP Basic."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            _, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return password
    return None


class OpsToken:
    """401 (with a Basic challenge, so a browser asks) on a guarded path without the token."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not guarded(scope["path"]):
            await self.app(scope, receive, send)
            return
        given = presented(Headers(scope=scope).get("authorization", ""))
        if given is not None and secrets.compare_digest(given.encode(), self.token):
            await self.app(scope, receive, send)
            return
        refusal = JSONResponse(
            {"detail": "this path needs the operations token (FLEET_OPS_TOKEN)"},
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="fleet operations", charset="UTF-8"'},
        )
        await refusal(scope, receive, send)
