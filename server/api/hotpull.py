"""The parameter pull every task makes, answered from memory before FastAPI routes the request.

``GET /v1/models/{model_id}/versions/{version}/params`` with no query and no If-None-Match, for a version
the catalog holds in memory (``Catalog.cached_params``), is answered here with the very response the
route (server/api/routes/models.py ``params``) builds: same status, body and headers. Anything else — a
float16 pull, a conditional one, a version only storage holds, a malformed path — goes on to the route,
which validates, documents (the OpenAPI document is the route's) and answers it. Routing through the
app's routers and solving the route's parameters was most of a pull's CPU; the answer does not need it.
"""

from __future__ import annotations

import re

from starlette.datastructures import State
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from server.api.routes.models import IMMUTABLE, OCTET

PARAMS_PATH = re.compile(r"/v1/models/([^/]+)/versions/([0-9]{1,9})/params")


class ParamsFromMemory:
    """Pure ASGI middleware; ``state`` is the app's (the coordinator is set on it at start-up)."""

    def __init__(self, app: ASGIApp, *, state: State) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        data = self._cached(scope)
        if data is None:
            await self.app(scope, receive, send)
            return
        data, etag = data
        response = Response(data, media_type=OCTET, headers={"ETag": etag, "Cache-Control": IMMUTABLE})
        await response(scope, receive, send)

    def _cached(self, scope: Scope) -> tuple[bytes, str] | None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
            return None
        match = PARAMS_PATH.fullmatch(scope["path"])
        if match is None:
            return None
        if any(name == b"if-none-match" for name, _ in scope["headers"]):
            return None
        coordinator = getattr(self.state, "coordinator", None)
        if coordinator is None:
            return None
        model_id, version = match.group(1), int(match.group(2))
        data = coordinator.catalog.cached_params(model_id, version)
        if data is None:
            return None
        return data, f'"{model_id}:{version}:float32"'
