"""The coordinator's web framework layer alone: the FastAPI app driven by raw ASGI calls, no sockets.

Many virtual devices run request → pull → push cycles concurrently on one event loop against the app
(SQLite file, durable group commit), so the cost measured is routing, dependencies, validation,
the core and the journal — everything `fleet serve` does except uvicorn's HTTP
parsing and the kernel's sockets. Reported as process CPU µs per cycle, which a loaded machine
distorts far less than wall-clock throughput; ``asgi_run(..., layers=True)`` also splits it by layer
(each route, the core's grant and apply, decoding, digest, metrics, the journal's writer thread).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from client._transport import encode_push

# which request of the cycle the running code serves (read by ``Layers``: per-route CPU)
ROUTE: contextvars.ContextVar[str] = contextvars.ContextVar("bench_route", default="bench")
_PROBE: Layers | None = None


def _enter(route: str) -> None:
    """The running task now serves ``route`` (the CPU used so far in this step goes to the previous one)."""
    ROUTE.set(route)
    if _PROBE is not None:
        _PROBE.switch(route)


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
        _enter("request")
        status, out = await call(
            app, "POST", "/v1/tasks", ask.encode(), {**auth, "content-type": "application/json"}
        )
        _enter("bench")
        if status != 201:
            raise RuntimeError(f"task request refused: {status} {out[:200]!r}")
        task = json.loads(out)
        _enter("pull")
        status, _ = await call(app, "GET", task["params_url"])
        _enter("bench")
        assert status == 200
        _enter("push")
        status, out = await call(app, "POST", f"/v1/tasks/{task['task_id']}/result", push, push_headers)
        _enter("bench")
        if status != 200:
            raise RuntimeError(f"push refused: {status} {out[:200]!r}")


def asgi_us(model: str, *, devices: int = 50, cycles: int = 10) -> float:
    """Process CPU µs per request → pull → push cycle through the app, ``devices`` at a time."""
    return asgi_run(model, devices=devices, cycles=cycles)["cpu_us_per_cycle"]


def asgi_run(model: str, *, devices: int = 50, cycles: int = 10, layers: bool = False) -> dict[str, Any]:
    """``asgi_us``'s measurement and the model version it left (one update per push: K = 1). With
    ``layers``, also the CPU µs per cycle of each layer (``Layers``; the instrumentation adds its own
    few µs, so the headline ``cpu_us_per_cycle`` is best taken from a run without it)."""
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

        async def main() -> tuple[float, int, dict[str, float]]:
            async with app.router.lifespan_context(app):
                await asyncio.gather(*(_device(app, i, "bench-enrollment", 1) for i in range(devices)))
                probe = Layers(app) if layers else None
                with probe.measuring() if probe is not None else nullcontext():
                    started = time.process_time()
                    await asyncio.gather(
                        *(_device(app, i, "bench-enrollment", cycles) for i in range(devices))
                    )
                    seconds = time.process_time() - started
                per_layer = {} if probe is None else probe.per_cycle(devices * cycles, seconds)
                return seconds, app.state.coordinator.stats()["version"], per_layer

        seconds, version, per_layer = asyncio.run(main())
        out: dict[str, Any] = {"cpu_us_per_cycle": seconds / (devices * cycles) * 1e6, "version": version}
        if layers:
            out["layers_us"] = per_layer
        return out


def _thread_cpu(thread: threading.Thread | None) -> float:
    """CPU seconds a thread has used (0 without one: the journal of a non-durable coordinator)."""
    if thread is None or thread.ident is None:
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


class Layers:
    """CPU time per layer of the request → pull → push cycle, in the app as it runs.

    - routes: the event loop thread's CPU per asyncio step, charged to the request it serves (the
      ``ROUTE`` context variable of the step's task), so concurrent devices do not blur the routes;
    - inner layers: synchronous functions timed with the thread's CPU clock (they never yield):
      the core's grant (``Coordinator.request_task_nowait``) and apply (``submit_nowait``, of which the
      journal append), the push's meta parsing, gradient decoding and digest, and every Prometheus
      update (the ``Metrics`` children wrapped);
    - the journal's writer thread (build the batch, the SQL, the commit) by its own CPU clock, and what
      the other threads used (the thread pool) as the rest of the process's CPU.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cpu: Counter[str] = Counter()
        self._patches: list[tuple[Any, str, Any]] = []
        self._route, self._since = "bench", 0.0  # the route the running asyncio step serves, since when

    def switch(self, route: str) -> None:
        now = time.thread_time()
        self.cpu["route: " + self._route] += now - self._since
        self._route, self._since = route, now

    def _timed(self, layer: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                return function(*args, **kwargs)
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu[layer] += time.thread_time() - started

        return timed

    def _patch(self, owner: Any, name: str, layer: str) -> None:
        original = getattr(owner, name)
        self._patches.append((owner, name, original))
        setattr(owner, name, self._timed(layer, original))

    @contextmanager
    def measuring(self) -> Iterator[None]:
        from server.api.routes import tasks

        coordinator = self.app.state.coordinator
        journal = coordinator.journal
        self._patch(coordinator, "request_task_nowait", "core: grant (request_task)")
        self._patch(coordinator, "submit_nowait", "core: apply (submit_nowait)")
        self._patch(journal, "record", "journal: append (in apply)")
        self._patch(journal, "grant", "journal: append grant (in grant)")
        self._patch(tasks, "parse_meta", "push: meta parse + validate")
        self._patch(tasks, "decode_tensor", "push: gradient decode")
        self._patch(tasks, "push_digest", "push: digest (sha256)")
        metrics = self.app.state.metrics
        for name, metric in list(vars(metrics).items()):
            if hasattr(metric, "_metrics") or hasattr(metric, "inc") or hasattr(metric, "observe"):
                self._patches.append((metrics, name, metric))
                setattr(metrics, name, _TimedMetric(metric, self))
        handle_run = asyncio.events.Handle._run
        cpu = self.cpu

        def timed_run(handle: Any) -> None:
            context = handle._context
            self._route = context.get(ROUTE, "bench") if context is not None else "bench"
            self._since = time.thread_time()
            try:
                handle_run(handle)
            finally:
                cpu["route: " + self._route] += time.thread_time() - self._since

        global _PROBE
        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
        _PROBE = self
        writer = journal._thread
        main_started, writer_started = time.thread_time(), _thread_cpu(writer)
        try:
            yield
        finally:
            self.cpu["thread: event loop"] += time.thread_time() - main_started
            self.cpu["thread: journal writer"] += _thread_cpu(writer) - writer_started
            asyncio.events.Handle._run = handle_run  # type: ignore[method-assign]
            _PROBE = None
            for owner, name, original in reversed(self._patches):
                setattr(owner, name, original)

    def per_cycle(self, cycles: int, process_seconds: float) -> dict[str, float]:
        """µs per cycle of each layer; the routes include their inner layers."""
        out = {layer: seconds / cycles * 1e6 for layer, seconds in sorted(self.cpu.items())}
        loop, writer = self.cpu["thread: event loop"], self.cpu["thread: journal writer"]
        out["thread: others (thread pool)"] = (process_seconds - loop - writer) / cycles * 1e6
        out["process total"] = process_seconds / cycles * 1e6
        return {layer: round(us, 1) for layer, us in out.items()}


class _TimedMetric:
    """A Prometheus metric (or a labelled child) whose updates are charged to the ``metrics`` layer."""

    def __init__(self, metric: Any, layers: Layers) -> None:
        self._metric, self._layers = metric, layers

    def labels(self, *args: Any, **kwargs: Any) -> _TimedMetric:
        started = time.thread_time()
        child = self._metric.labels(*args, **kwargs)
        self._layers.cpu["metrics (prometheus)"] += time.thread_time() - started
        return _TimedMetric(child, self._layers)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._metric, name)
        if name in ("inc", "observe", "set", "dec"):
            return self._layers._timed("metrics (prometheus)", attribute)
        return attribute
