"""The coordinator's web framework layer alone: the FastAPI app driven by raw ASGI calls, no sockets.

Many virtual devices run request → pull → push cycles concurrently on one event loop against the app
(SQLite file, durable group commit), so the cost measured is routing, dependencies, validation,
the core and the journal — everything `fleet serve` does except uvicorn's HTTP
parsing and the kernel's sockets. Reported as process CPU µs per cycle, which a loaded machine
distorts far less than wall-clock throughput.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from client._transport import encode_push


async def call(
    app: Any, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One request through the ASGI interface; returns (status, body)."""
    path, _, query = path.partition("?")
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    status, chunks = 0, []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # the client never disconnects
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def _device(app: Any, index: int, key: str, cycles: int) -> None:
    status, out = await call(
        app,
        "POST",
        "/v1/devices",
        json.dumps({"enrollment_key": key, "device_model": f"Bench {index % 5}"}).encode(),
        {"content-type": "application/json"},
    )
    assert status == 201, out
    auth = {"authorization": f"Bearer {json.loads(out)['token']}"}
    _, out = await call(app, "GET", "/v1/models/active")
    active = json.loads(out)
    counts = [0] * active["num_classes"]
    counts[index % len(counts)] = 10
    rng = np.random.default_rng(index)
    gradient = (rng.standard_normal(active["num_params"]) * 1e-4).astype("<f4")
    meta = {"label_counts": counts, "loss": 1.0, "compute_time_ms": 50.0, "energy": 0.001, "batch_size": 10}
    ask = json.dumps({"label_counts": counts, "features": {"total_memory": 4e9, "available_memory": 1e9}})
    raw_headers, push = encode_push(meta, gradient)  # what the device client sends
    push_headers = {**auth, **raw_headers}
    for _ in range(cycles):
        status, out = await call(
            app, "POST", "/v1/tasks", ask.encode(), {**auth, "content-type": "application/json"}
        )
        if status != 201:
            raise RuntimeError(f"task request refused: {status} {out[:200]!r}")
        task = json.loads(out)
        status, _ = await call(app, "GET", task["params_url"])
        assert status == 200
        status, out = await call(app, "POST", f"/v1/tasks/{task['task_id']}/result", push, push_headers)
        if status != 200:
            raise RuntimeError(f"push refused: {status} {out[:200]!r}")


def asgi_us(model: str, *, devices: int = 50, cycles: int = 10) -> float:
    """Process CPU µs per request → pull → push cycle through the app, ``devices`` at a time."""
    return asgi_run(model, devices=devices, cycles=cycles)["cpu_us_per_cycle"]


def asgi_run(model: str, *, devices: int = 50, cycles: int = 10) -> dict[str, float]:
    """``asgi_us``'s measurement and the model version it left (one update per push: K = 1)."""
    from server.api.app import create_app
    from server.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            enrollment_key="bench-enrollment",
            admin_token="bench-admin",
            initial_model=model,
            eval_data=None,
            rate_limit_per_second=1e6,
            rate_limit_burst=1_000_000,
        )
        app = create_app(settings)

        async def main() -> tuple[float, int]:
            async with app.router.lifespan_context(app):
                await asyncio.gather(*(_device(app, i, "bench-enrollment", 1) for i in range(devices)))
                started = time.process_time()
                await asyncio.gather(*(_device(app, i, "bench-enrollment", cycles) for i in range(devices)))
                seconds = time.process_time() - started
                return seconds, app.state.coordinator.stats()["version"]

        seconds, version = asyncio.run(main())
        return {"cpu_us_per_cycle": seconds / (devices * cycles) * 1e6, "version": version}
