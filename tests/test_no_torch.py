"""The coordinator and the worker run a full task without importing torch (or each other)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # a server and a worker in fresh interpreters: the slow tier


def run_isolated(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_server_and_worker_complete_a_task_without_torch(tmp_path):
    last = run_isolated(f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        import numpy as np
        from starlette.testclient import TestClient
        from server.api.app import create_app
        from server.settings import Settings
        from client import DeviceData, StaticFeatures, Worker, WorkerConfig

        settings = Settings(
            data_dir={str(tmp_path)!r}, enrollment_key="k", admin_token="a", eval_data=None, k=1
        )
        rng = np.random.default_rng(0)
        data = DeviceData(rng.random((30, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 30))
        with TestClient(create_app(settings), base_url="http://testserver") as http:
            config = WorkerConfig(base_url="http://testserver", enrollment_key="k", data=data, max_tasks=2)
            features = StaticFeatures({{"total_memory": 4e9}})
            worker = Worker(config, client=http, features=features, sleep=lambda s: None)
            summary = worker.run()
            assert summary.tasks == 2, summary
            assert http.app.state.coordinator.run.version == 2
        print(sorted(m for m in ("torch", "torchvision", "functorch") if m in sys.modules))
    """)
    assert last == "[]"
