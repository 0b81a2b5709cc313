"""Refuse a console POST sent from another site (403), whatever its CSRF token.

Defence in depth beside the CSRF token and the SameSite=Strict cookie: a browser names the page a
request comes from in ``Origin`` (or, from older ones, ``Referer``), and no page can forge it. A request
naming neither is not from a browser form and is left to the token.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(netloc: str, scheme: str) -> tuple[str, int | None] | None:
    """(host, port) of ``netloc``; the port is None when it is the scheme's default (or none is given)."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host.lower(), None if port in (None, DEFAULT_PORTS.get(scheme)) else port


def same_origin(claimed: str, host_header: str, scheme: str) -> bool:
    """Whether ``claimed`` (an Origin, or a Referer URL) names the host this request was sent to.

    The schemes are not compared: behind a TLS-terminating proxy the app sees http while the browser
    says https; the host and a non-default port must match."""
    parts = urlsplit(claimed)
    if parts.scheme not in DEFAULT_PORTS:
        return False  # "null" (a sandboxed frame, a file), or nonsense
    ours, theirs = _host_port(host_header, scheme), _host_port(parts.netloc, parts.scheme)
    return ours is not None and ours == theirs


class SameOriginPosts:
    """Pure ASGI: a state-changing /admin request whose Origin (else Referer) is foreign gets 403."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in UNSAFE or not scope["path"].startswith("/admin"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        claimed = headers.get("origin") or headers.get("referer")
        if claimed is None or same_origin(claimed, headers.get("host", ""), scope.get("scheme", "http")):
            await self.app(scope, receive, send)
            return
        refusal = JSONResponse({"detail": "refused: the request comes from another site"}, status_code=403)
        await refusal(scope, receive, send)
