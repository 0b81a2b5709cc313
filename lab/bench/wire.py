"""Wire size: bytes a device moves per task (pull + push, headers included) against raw float32 parameters.

A real worker talks to the app in-process; an httpx event hook counts every request and response as it
would cross the network (start line, headers, body).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lab.bench.plans import WirePlan

TARGET = 1.05  # bytes each way / raw float32 parameter bytes


def _head_bytes(start_line: str, headers: httpx.Headers) -> int:
    return len(start_line) + 2 + sum(len(k) + len(v) + 4 for k, v in headers.raw) + 2


def measure(model: str, encoding: str, tasks: int) -> dict[str, Any]:
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

    from client import DeviceData, StaticFeatures, Worker, WorkerConfig
    from server.api.app import create_app
    from server.settings import Settings

    moved = {"pull": 0, "push": 0}

    def count(response: httpx.Response) -> None:
        request = response.request
        path = request.url.path
        if path.endswith("/params"):
            kind = "pull"
        elif path.endswith("/result"):
            kind = "push"
        else:
            return
        response.read()
        moved[kind] += _head_bytes(
            f"{request.method} {request.url.raw_path.decode()} HTTP/1.1", request.headers
        )
        moved[kind] += len(request.content)
        moved[kind] += _head_bytes("HTTP/1.1 200 OK", response.headers) + len(response.content)

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            enrollment_key="k",
            admin_token="a",
            initial_model=model,
            eval_data=None,
            rate_limit_per_second=1e6,
            rate_limit_burst=10**6,
        )
        rng = np.random.default_rng(0)
        data = DeviceData(rng.random((50, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 50))
        with TestClient(create_app(settings), base_url="http://testserver") as http:
            http.event_hooks["response"] = [count]
            config = WorkerConfig(
                base_url="http://testserver",
                enrollment_key="k",
                data=data,
                max_tasks=tasks,
                wire_encoding=encoding,
            )  # type: ignore[arg-type]
            Worker(
                config, client=http, features=StaticFeatures({"total_memory": 4e9}), sleep=lambda s: None
            ).run()
            raw = 4 * http.app.state.coordinator.run.manifest.num_params
    pull, push = moved["pull"] / tasks, moved["push"] / tasks
    limit = TARGET if encoding == "float32" else TARGET / 2
    return {
        "model": model,
        "encoding": encoding,
        "raw float32 bytes": raw,
        "pull bytes/task": round(pull),
        "push bytes/task": round(push),
        "pull ratio": round(pull / raw, 4),
        "push ratio": round(push / raw, 4),
        "target": f"≤ {limit:.3f}x each way",
        "met": pull / raw <= limit and push / raw <= limit,
    }


def run(plan: WirePlan) -> dict[str, Any]:
    rows = [
        measure(model, encoding, plan.tasks)
        for model in ("mnist_cnn", "mlp")
        for encoding in ("float32", "float16")
    ]
    for row in rows:
        print(
            f"wire {row['model']:9s} {row['encoding']}: pull {row['pull ratio']:.3f}x, push "
            f"{row['push ratio']:.3f}x of raw float32 ({row['raw float32 bytes']} B)"
        )
    return {
        "name": "wire",
        "title": "Wire size per task (pull + push, with HTTP headers)",
        "table": rows,
        "note": "A real worker against the app in-process; float16's accuracy cost is measured by the "
        "`wire-float16` experiment, not here.",
    }
