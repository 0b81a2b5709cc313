"""Refuse request bodies above a size limit before they are buffered (413), and bodies that do not arrive
within a deadline (408).

uvicorn times out idle keep-alive connections, not a request whose body trickles in (one byte a second
holds a connection, and a worker's attention, for as long as the client likes): the deadline is kept here,
around every read of the body, for all routes alike.
"""

from __future__ import annotations

import contextlib
import json

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


class BodyLimit:
    """Pure ASGI middleware: checks Content-Length, counts streamed bytes when it is absent, and ends a
    request whose body is not complete ``timeout_s`` seconds after the request started."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._refuse(send, 413, f"request body exceeds {self.max_bytes} bytes")
            return
        deadline = anyio.current_time() + self.timeout_s
        received = 0
        complete = False  # the whole body is in: later reads wait for a disconnect, without deadline
        started = False  # a response has begun (the app's or our refusal)
        refused = False  # we answered: whatever the app sends after is dropped

        async def refuse(code: int, detail: str) -> None:
            nonlocal started, refused
            if not started:
                await self._refuse(send, code, detail)
                started = refused = True

        async def guarded_receive() -> Message:
            nonlocal received, complete
            if complete:
                return await receive()
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    complete = not message.get("more_body", False)
                    if received > self.max_bytes:
                        # answered here: FastAPI turns an exception while it reads a body into a 400
                        await refuse(413, f"request body exceeds {self.max_bytes} bytes")
                        raise BodyTooLarge
                else:
                    complete = True  # http.disconnect
                return message
            await refuse(408, f"the request body did not arrive within {self.timeout_s:g} s")
            raise BodyTimeout

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        # answered (or the app's answer had begun and is cut short: the connection closes)
        with contextlib.suppress(BodyTooLarge, BodyTimeout):
            await self.app(scope, guarded_receive, tracking_send)

    @staticmethod
    async def _refuse(send: Send, code: int, detail: str) -> None:
        """Answer and close: the rest of the body is never read, so the connection cannot be reused."""
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
