"""Coordinator throughput and latency over real HTTP, with the cost of each layer beside it.

Four layers are timed in the same run, per model, each named for what it measures:
- ``math``: decode the float32 body, validate it, AdaSGD weighs it, update the parameters (no HTTP, no DB):
  CPU µs per update;
- ``core``: ``Coordinator.request_task`` + ``submit`` on a SQLite file, one device at a time, so every
  push waits for its own commit and fsync: a sequential latency per task, NOT a throughput limit (group
  commit shares one fsync among concurrent pushes, which is why HTTP can beat 1/latency);
- ``app``: the FastAPI app driven through raw ASGI calls by 50 concurrent devices (bench.asgi): process
  CPU per request → pull → push cycle, everything but uvicorn's HTTP parsing and the sockets;
- ``http``: `fleet serve` in its own process, a load generator (bench.loadgen) in another, over loopback.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from lab.bench.asgi import asgi_us
from lab.bench.plans import ThroughputPlan

TARGETS = {"mnist_cnn": 500, "mlp": 200}  # durable pushes per second at 200 devices; p99 ≤ 100 ms


def math_us(model: str, updates: int) -> float:
    """µs per update of decode + validate + strategy + parameter update."""
    from models.manifest import builtin
    from server.core.types import TaskResult
    from server.core.validation import validate_result
    from server.strategies import AdaSGD, Arrival

    bundle = builtin(model)
    manifest, params = bundle.manifest, bundle.init_params.copy()
    body = (np.random.default_rng(0).standard_normal(manifest.num_params) * 1e-4).astype("<f4").tobytes()
    counts = np.zeros(manifest.num_classes, np.int64)
    counts[0] = 10
    strategy = AdaSGD()
    started = time.perf_counter()
    for i in range(updates):
        gradient = np.frombuffer(body, dtype="<f4").astype(np.float32)
        result = TaskResult(counts, 1.0, 50.0, None, 10, gradient, "")
        validate_result(manifest, result, max_gradient_norm=1e4)
        strategy.receive(Arrival(str(i), "d", i, 3, gradient, counts, 10, 1.0, float(i)))
        params = strategy.aggregate(params)
    return (time.perf_counter() - started) / updates * 1e6


def core_us(model: str, updates: int) -> float:
    """µs per task (request + durable submit) through the coordinator core on a SQLite file."""
    from server.compose import build_coordinator
    from server.core.types import TaskRequest, TaskResult
    from server.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp), enrollment_key="k", admin_token="a", initial_model=model, eval_data=None
        )
        coordinator = build_coordinator(settings)
        device, _ = coordinator.enroll("Bench")
        manifest = coordinator.run.manifest
        body = (np.random.default_rng(0).standard_normal(manifest.num_params) * 1e-4).astype("<f4")
        counts = np.zeros(manifest.num_classes, np.int64)
        counts[0] = 10
        features = {"total_memory": 4e9, "available_memory": 1e9}
        started = time.perf_counter()
        for i in range(updates):
            grant = coordinator.request_task(TaskRequest(device, features, counts))
            digest = hashlib.sha256(str(i).encode()).hexdigest()
            coordinator.submit(device, grant.task_id, TaskResult(counts, 1.0, 50.0, None, 10, body, digest))
        return (time.perf_counter() - started) / updates * 1e6


def http_load(model: str, devices: int, seconds: float) -> dict[str, Any]:
    from fleet.process import ENROLL, ServerProcess

    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), initial_model=model) as server:
        done = subprocess.run(
            [sys.executable, "-m", "lab.bench.loadgen", server.url, ENROLL, str(devices), str(seconds)],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        return json.loads(done.stdout.strip().splitlines()[-1])


def run(plan: ThroughputPlan) -> dict[str, Any]:
    rows = []
    for model in ("mnist_cnn", "mlp"):
        math = math_us(model, plan.math_updates)
        core = core_us(model, plan.core_tasks)
        app = asgi_us(model, devices=plan.app_devices, cycles=plan.app_cycles)
        for devices in (50, 200):
            load = http_load(model, devices, plan.load_seconds)
            http_us = 1e6 / load["pushes_per_s"] if load["pushes_per_s"] else float("inf")
            row = {
                "model": model,
                "devices": devices,
                "pushes/s": load["pushes_per_s"],
                "task p50/p99 ms": f"{load['task_p50_ms']} / {load['task_p99_ms']}",
                "push p50/p99 ms": f"{load['push_p50_ms']} / {load['push_p99_ms']}",
                "math CPU µs/update": round(math, 1),
                "core sequential µs/task (own fsync)": round(core, 1),
                "app CPU µs/cycle (ASGI)": round(app, 1),
                "HTTP wall µs/push (1 / throughput)": round(http_us, 1),
                "target pushes/s": TARGETS[model],
                "met": load["pushes_per_s"] >= TARGETS[model] and (load["push_p99_ms"] or 1e9) <= 100,
            }
            rows.append(row)
            print(
                f"throughput {model:9s} {devices:3d} devices: {row['pushes/s']} pushes/s "
                f"(target {TARGETS[model]}), push p99 {load['push_p99_ms']} ms; math {math:.0f} µs/update, "
                f"core sequential {core:.0f} µs/task, app CPU {app:.0f} µs/cycle, http {http_us:.0f} µs/push"
            )
    return {
        "name": "throughput",
        "title": "Coordinator throughput and latency (durable pushes)",
        "table": rows,
        "note": "math: CPU per update without HTTP or storage. core sequential: one device at a time "
        "through the coordinator core on a SQLite file, each push waiting for its own commit (a latency; "
        "concurrent pushes share commits). app: process CPU per request → pull → push cycle through the "
        "FastAPI app without sockets. HTTP: wall time per push at the measured throughput. The load "
        "generator runs in its own process on the same 2 cores as the server.",
    }
