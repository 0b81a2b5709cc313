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
