"""The worker against the real coordinator app, in-process (Starlette's TestClient is an httpx.Client)."""

from __future__ import annotations

import numpy as np
import pytest

from client import DeviceData, StaticFeatures, Worker, WorkerConfig
from client._energy import EnergyModel


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_worker_trains_against_the_real_app_until_finished(tmp_path, database_url):
    pytest.importorskip("fastapi")
    app_module = pytest.importorskip("server.api.app")
    settings_module = pytest.importorskip("server.settings")
    from starlette.testclient import TestClient

    settings = settings_module.Settings(
        data_dir=tmp_path,
        database_url=database_url,
        enrollment_key="key",
        admin_token="admin",
        max_versions=3,
        eval_data=None,
        k=1,  # a version per task (the default buffers 5)
    )
    rng = np.random.default_rng(0)
    data = DeviceData(rng.integers(0, 256, (40, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, 40))
    reports = []
    with TestClient(app_module.create_app(settings), base_url="http://testserver") as http:
        config = WorkerConfig(
            base_url="http://testserver", enrollment_key="key", data=data, max_tasks=10, seed=0
        )
        worker = Worker(
            config,
            client=http,
            features=StaticFeatures({"total_memory": 4e9, "available_memory": 1e9}),
            energy=EnergyModel(),
            on_report=reports.append,
            sleep=lambda seconds: None,
        )
        summary = worker.run()
    assert summary.finished and summary.tasks == 3, summary
    assert [r.current_version for r in reports] == [1, 2, 3]
    assert all(np.isfinite(r.loss) and r.compute_time_ms > 0 for r in reports)


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_two_drawings_granted_1000_compute_and_report_2_and_the_profiler_learns_2(
    tmp_path, database_url, monkeypatch
):
    """The operator's phone (issue 29): the push says the 2 examples computed, the coordinator takes a batch
    below the grant, and I-Prof learns time per example from 2, not from the 1,000 granted."""
    pytest.importorskip("fastapi")
    app_module = pytest.importorskip("server.api.app")
    settings_module = pytest.importorskip("server.settings")
    from starlette.testclient import TestClient

    from profiler import IProf

    observed: list[int] = []
    observe = IProf.observe

    def spy(self, device_model, features, batch_size, time_ms, energy=None):  # type: ignore[no-untyped-def]
        observed.append(batch_size)
        return observe(self, device_model, features, batch_size, time_ms, energy)

    monkeypatch.setattr(IProf, "observe", spy)
    settings = settings_module.Settings(
        data_dir=tmp_path, database_url=database_url, enrollment_key="key", admin_token="admin",
        eval_data=None, k=1, min_batch=1000, max_batch=1000,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    data = DeviceData(rng.integers(0, 256, (2, 1, 28, 28), dtype=np.uint8), np.array([7, 1]))
    reports = []
    with TestClient(app_module.create_app(settings), base_url="http://testserver") as http:
        worker = Worker(
            WorkerConfig(base_url="http://testserver", enrollment_key="key", data=data, max_tasks=2, seed=0),
            client=http,
            features=StaticFeatures({"total_memory": 4e9, "available_memory": 1e9}),
            energy=EnergyModel(),
            on_report=reports.append,
            sleep=lambda seconds: None,
        )
        granted: list[int] = []
        worker.on_event = lambda e: granted.append(e.grant.batch_size) if e.kind == "task" else None
        summary = worker.run()
    assert summary.tasks == 2 and granted == [1000, 1000], (summary, granted)
    assert [r.batch_size for r in reports] == [2, 2] and all(r.applied for r in reports)
    assert observed == [2, 2]
