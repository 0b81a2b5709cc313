"""One Fleet arm of the peer benchmark: a real `fleet serve` process on loopback and the workload's
devices as ``client.Worker`` threads over HTTP, each adding its delay per sample to every task.

The batch is pinned to 100 (FLEET_MIN_BATCH = FLEET_MAX_BATCH) so that Fleet's gradients and Flower's
local steps are the same size; the server evaluates on the 1,000 held-out digits at least every
second, and the curve is read back from /v1/admin/evaluations with the server's wall times.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fleet.process import ADMIN, ENROLL, ServerProcess
from lab.bench.peer_workload import BATCH, MODEL, Workload
from server.strategies import default_strategy


@dataclass(frozen=True)
class FleetArm:
    """A coordinator configuration; ``None`` everywhere is Fleet's default, untuned."""

    label: str
    strategy: str | None = None
    learning_rate: float | None = None
    k: int | None = None
    rate_factor: float | None = None  # the default strategy at this multiple of its own rate
    fields: tuple[tuple[str, str], ...] = ()  # the default strategy with these of its settings changed

    def settings(self, default_rate: float) -> dict[str, Any]:
        chosen: dict[str, Any] = {"strategy": self.strategy, "learning_rate": self.learning_rate, "k": self.k}
        if self.rate_factor is not None:
            chosen["learning_rate"] = round(default_rate * self.rate_factor, 6)
        chosen |= {f"strategy__{field}": value for field, value in self.fields}
        return {k: v for k, v in chosen.items() if v is not None}


@dataclass
class Pushes:
    """Every acknowledged gradient, from the workers' reports (thread-safe appends)."""

    at: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    compute_ms: dict[int, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def recorder(self, device: int) -> Callable[[Any], None]:
        def record(report: Any) -> None:
            with self.lock:
                self.at.append(time.time())
                self.staleness.append(int(report.staleness))
                self.compute_ms.setdefault(device, []).append(float(report.compute_time_ms))

        return record


def _server(
    workdir: Path, workload: Workload, arm: FleetArm, default_rate: float, stop_at: float
) -> ServerProcess:
    """The coordinator of one arm: only what the arm says, no FLEET_* setting inherited from the caller's
    environment (ServerProcess copies os.environ: those are left out while it does)."""
    inherited = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("FLEET_")}
    try:
        return ServerProcess(
            workdir,
            initial_model=MODEL,
            min_batch=BATCH,
            max_batch=BATCH,
            eval_data=workload.test,
            eval_every_versions=10,
            eval_interval_s=1.0,
            target_accuracy=stop_at,
            **arm.settings(default_rate),
        )
    finally:
        os.environ.update(inherited)


def run_fleet_arm(
    workload: Workload,
    arm: FleetArm,
    workdir: Path,
    *,
    cap_s: float,
    stop_at: float,
    on_progress: Callable[[float, float], None] | None = None,
) -> dict[str, Any]:
    """Train until an evaluation reaches ``stop_at`` or ``cap_s`` seconds after the devices started."""
    from client import DeviceData, Worker, WorkerConfig

    _, default_rate = default_strategy(MODEL)  # the model's own rate, as the default arm runs it
    server = _server(workdir, workload, arm, default_rate, stop_at).start()
    headers = {"Authorization": f"Bearer {ADMIN}"}
    pushes, stop, threads = Pushes(), threading.Event(), []
    try:
        stats = httpx.get(f"{server.url}/v1/admin/stats", headers=headers, timeout=10).json()
        model_id = stats["model_id"]
        v0 = httpx.get(f"{server.url}/v1/models/{model_id}/versions/0/params", timeout=10).content
        workers = []
        for i, (path, delay) in enumerate(workload.assignment()):
            with np.load(path) as shard:
                data = DeviceData(shard["x"], shard["y"])
            config = WorkerConfig(
                base_url=server.url,
                enrollment_key=ENROLL,
                data=data,
                device_model=f"peer device {i}",
                delay_ms_per_sample=delay,
                seed=i,
                max_seconds=cap_s,
            )
            workers.append(Worker(config, on_report=pushes.recorder(i)))
        started = time.time()  # the clock starts as the devices start: enrollment and downloads count
        for i, worker in enumerate(workers):
            thread = threading.Thread(target=_device, args=(worker, stop), name=f"peer-{i}", daemon=True)
            threads.append(thread)
            thread.start()
        while time.time() - started < cap_s and any(t.is_alive() for t in threads):
            time.sleep(0.5)
            try:
                stats = httpx.get(f"{server.url}/v1/admin/stats", headers=headers, timeout=5).json()
            except httpx.HTTPError:
                continue
            if on_progress is not None:
                on_progress(time.time() - started, stats["accuracy"] or 0.0)
            if stats["status"] == "finished":
                break
        ended = time.time()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        evaluations = httpx.get(
            f"{server.url}/v1/admin/evaluations", params={"model_id": model_id}, headers=headers, timeout=10
        ).json()
        stats = httpx.get(f"{server.url}/v1/admin/stats", headers=headers, timeout=10).json()
    finally:
        stop.set()
        server.stop()
    return _result(arm, workload, evaluations, stats, pushes, started, ended, v0)


def _device(worker: Any, stop: threading.Event) -> None:
    with worker:
        worker.run(stop)


def _result(
    arm: FleetArm,
    workload: Workload,
    evaluations: list[dict[str, Any]],
    stats: dict[str, Any],
    pushes: Pushes,
    started: float,
    ended: float,
    v0: bytes,
) -> dict[str, Any]:
    strategy = stats.get("strategy") or {}
    staleness = np.array(pushes.staleness or [0])
    slowest = {i: round(min(ms), 1) for i, ms in sorted(pushes.compute_ms.items())}
    return {
        "system": "fleet",
        "label": arm.label,
        "strategy": strategy.get("strategy"),
        "learning_rate": strategy.get("learning_rate"),
        "k": strategy.get("k"),
        "settings": {k: v for k, v in vars(arm).items() if k != "label" and v not in (None, ())},
        "duration_s": round(ended - started, 2),
        # (seconds since the devices started, accuracy, loss, model version)
        "curve": [
            (round(e["at"] - started, 2), e["accuracy"], e["loss"], e["version"])
            for e in sorted(evaluations, key=lambda e: e["at"])
        ],
        "work_at": [round(t - started, 3) for t in sorted(pushes.at)],  # one entry per gradient
        "work_unit": "gradients",
        "staleness_p50": float(np.percentile(staleness, 50)),
        "staleness_p99": float(np.percentile(staleness, 99)),
        "updates": stats.get("version"),
        "init_sha256": hashlib.sha256(v0).hexdigest(),
        "init_matches_workload": hashlib.sha256(v0).hexdigest() == workload.init_sha256,
        "min_task_ms_by_device": slowest,  # ≥ 100 × d_i: the added delay is there
    }
