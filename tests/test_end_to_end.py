"""Real HTTP end to end: a `fleet serve` process, device workers on loopback, a SIGKILL and a restart.

Training over real HTTP runs on SQLite; the crash test, whose subject is what storage kept, runs on
SQLite and on PostgreSQL (the ``storage_url`` fixture).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from client import Worker, WorkerConfig
from sim.data import Dataset, write_shards
from tests.processes import ENROLL, ServerProcess

pytestmark = pytest.mark.slow


def start_workers(url: str, shards, stop: threading.Event, reports: list, **config) -> list[Worker]:
    workers = []
    for i, shard in enumerate(shards):
        worker = Worker(
            WorkerConfig(
                base_url=url,
                enrollment_key=ENROLL,
                data=shard,
                seed=i,
                device_model=f"Phone {i % 2}",
                backoff_initial=0.2,
                backoff_max=1.0,
                max_consecutive_errors=None,
                **config,
            ),
            on_report=reports.append,
        )
        threading.Thread(target=worker.run, args=(stop,), daemon=True).start()
        workers.append(worker)
    return workers


def test_three_workers_reach_80_percent_over_real_http(tmp_path, database_url):
    shards, test_path = write_shards(tmp_path / "data", devices=3, partition="iid", seed=1)
    server = ServerProcess(
        tmp_path / "server",
        database_url=database_url,
        eval_data=test_path,
        eval_every_versions=10,
        eval_interval_s=1,
        target_accuracy=0.80,
        learning_rate=0.1,
        max_batch=64,
        time_slo_ms=500,
    )
    stop, reports = threading.Event(), []
    with server:
        start_workers(server.url, shards, stop, reports, max_seconds=150)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and server.admin("/v1/admin/stats").json()["status"] != "finished":
            time.sleep(0.5)
        stop.set()
        stats = server.admin("/v1/admin/stats").json()
        evaluations = server.admin("/v1/admin/evaluations").json()
        best = max(evaluations, key=lambda e: e["accuracy"])
        model_id = stats["model_id"]
        onnx_file = httpx.get(
            f"{server.url}/v1/models/{model_id}/inference.onnx",
            params={"version": best["version"]},
            timeout=30,
        ).content
    assert stats["status"] == "finished", stats
    assert best["accuracy"] >= 0.80, evaluations
    assert len({r.task_id for r in reports}) == len(reports) >= stats["version"] > 0
    # the downloaded inference model scores what the server recorded, on the held-out digits
    test = Dataset.load(test_path)
    session = ort.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    accuracy = float((session.run(None, {"x": test.x})[0].argmax(axis=1) == test.y).mean())
    assert accuracy == pytest.approx(best["accuracy"], abs=1e-6)
    assert accuracy >= 0.80


def connect_autocommit(database_url: str) -> tuple[Any, str]:
    """A plain DB-API connection to the server's database and the statement that opens a snapshot."""
    if database_url.startswith("sqlite"):
        return sqlite3.connect(database_url.split("///", 1)[1], isolation_level=None), "BEGIN"
    import psycopg

    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    return psycopg.connect(url, autocommit=True), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def stored_snapshot(database_url: str) -> tuple[dict[str, str], dict[str, dict], int]:
    """Applied tasks, profiler states and model version in one read transaction (devices keep pushing)."""
    conn, begin = connect_autocommit(database_url)
    try:
        conn.execute(begin)
        applied = dict(conn.execute("SELECT id, device_model FROM tasks WHERE status = 'applied'"))
        profiles = {
            key: state if isinstance(state, dict) else json.loads(state)
            for key, state in conn.execute("SELECT key, state FROM profiler_state")
        }
        version = conn.execute("SELECT current_version FROM models WHERE active").fetchone()[0]
        conn.execute("COMMIT")
    finally:
        conn.close()
    return applied, profiles, version


def test_sigkill_while_pushing_loses_no_acknowledged_gradient(tmp_path, storage_url):
    database_url = storage_url
    shards, _ = write_shards(tmp_path / "data", devices=3, partition="sorted", seed=2)
    server = ServerProcess(tmp_path / "server", database_url=database_url, max_batch=16, time_slo_ms=200, k=1)
    stop, reports = threading.Event(), []
    server.start()
    try:
        workers = start_workers(server.url, shards, stop, reports)
        while len(reports) < 40:
            time.sleep(0.05)
        server.kill()
        acknowledged = list(reports)  # every answer a device received was sent before the kill
        last = max(r.current_version for r in acknowledged)
        tokens = [w.api.token for w in workers]

        server.start()
        applied, profiles, version = stored_snapshot(database_url)
        assert {r.task_id for r in acknowledged} <= set(applied)
        assert version >= last
        assert version == len(applied)  # K = 1: one version per applied gradient
        model = httpx.get(f"{server.url}/v1/models/active", timeout=10).json()
        assert model["current_version"] >= version
        # parameters: the acknowledged version is stored, and the model restarts from the newest one
        params = httpx.get(f"{server.url}/v1/models/{model['model_id']}/versions/{last}/params", timeout=10)
        assert params.status_code == 200 and len(params.content) == 4 * 11_786
        # devices: the tokens issued before the crash still authenticate
        for token in tokens:
            response = httpx.post(
                f"{server.url}/v1/tasks",
                headers={"Authorization": f"Bearer {token}"},
                json={"label_counts": [1] * 10},
                timeout=10,
            )
            assert response.status_code == 201, response.text
        # profiler: each device model's personal model saw exactly the applied tasks of that model
        for device_model in set(applied.values()):
            expected = sum(1 for m in applied.values() if m == device_model)
            assert profiles[f"device:{device_model}"]["time"]["n_updates"] == expected
        # training goes on after the restart with the same devices
        before = len(reports)
        deadline = time.monotonic() + 60
        while len(reports) < before + 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(reports) >= before + 10
        after = httpx.get(f"{server.url}/v1/models/active", timeout=10).json()["current_version"]
        assert after > model["current_version"]
        assert np.all(
            np.isfinite(
                np.frombuffer(
                    httpx.get(
                        f"{server.url}/v1/models/{model['model_id']}/versions/{after}/params", timeout=10
                    ).content,
                    "<f4",
                )
            )
        )
    finally:
        stop.set()
        server.stop()
