"""Issue 29: a device declines a task whose terms it cannot run, the coordinator records why, and the device
keeps working (a real client against the app in process)."""

from __future__ import annotations

import threading
import warnings
from dataclasses import replace

import numpy as np
import pytest

from client import DeviceData, StaticFeatures, Worker, WorkerConfig
from client._energy import EnergyModel
from server.strategies import TaskTerms
from tests.conftest import ENROLL, FEATURES, settings_for

warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
from starlette.testclient import TestClient  # noqa: E402

# what AUDP handed out without DP (issue 29): norm-Laplace terms the privacy ledger never completed
UNCOMPLETED = {"mechanism": "clip-normlaplace/1", "clip": 3.0, "noise_multiplier": 1.0, "expected_batch": 12}
UNKNOWN = {"mechanism": "secure-aggregation/7", "clip": 1.0, "noise_multiplier": 1.0, "sampling_rate": 0.1,
           "expected_batch": 8}  # fmt: skip


def _worker(http: TestClient, tmp_path, **config) -> Worker:
    rng = np.random.default_rng(0)
    data = DeviceData(rng.integers(0, 256, (200, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, 200))
    settings = WorkerConfig(
        base_url=str(http.base_url), enrollment_key=ENROLL, data=data, state_dir=tmp_path / "device", seed=0,
        **config,
    )  # fmt: skip
    features = StaticFeatures({k: v for k, v in FEATURES.items() if v is not None})
    return Worker(settings, client=http, features=features, energy=EnergyModel(), sleep=lambda _: None)


@pytest.mark.parametrize(
    "terms", [UNCOMPLETED, UNKNOWN], ids=["dp-terms-without-fields", "unknown-mechanism"]
)
def test_a_device_declines_terms_it_cannot_run_and_keeps_working(tmp_path, database_url, terms):
    from server.api.app import create_app

    app = create_app(settings_for(tmp_path, database_url=database_url, initial_model="logreg"))
    with TestClient(app) as http:
        coordinator = http.app.state.coordinator
        strategy = coordinator.run.strategy
        own_terms = strategy.terms_for
        strategy.terms_for = lambda **_: TaskTerms(extra={"dp": dict(terms)})
        granted: list[str] = []
        enough = threading.Event()  # three grants declined in turn; a wall-clock budget was flaky under load

        def on_event(event) -> None:
            if event.grant is not None:
                granted.append(event.grant.task_id)
                if len(granted) >= 3:
                    enough.set()

        worker = _worker(http, tmp_path, max_seconds=30.0, max_retry_after=0.01)
        worker.on_event = on_event
        summary = worker.run(enough)  # never raises: every task is declined and the device asks again
        assert summary.tasks == 0 and summary.errors == 0 and len(granted) >= 2
        reason = next(iter(summary.rejections))
        assert summary.rejections[reason] == len(granted)

        # the coordinator counted every one, audited the first with its detail, and ended each lease
        assert coordinator.recent.declines == {reason: len(granted)}
        audited = [e for e in http.app.state.admin_store.audit_entries() if e.action == "task_declined"]
        assert len(audited) == 1 and audited[0].detail["reason"] == reason
        assert audited[0].detail["task_id"] == granted[0] and audited[0].detail["detail"]
        headers = {"Authorization": f"Bearer {worker.api.token}"}
        late = http.post(f"/v1/tasks/{granted[-1]}/decline", json={"reason": reason}, headers=headers)
        assert late.status_code == 204  # idempotent while the lease is open in memory: counted again
        num_params = coordinator.run.manifest.num_params
        meta = '{"label_counts":[1,0,0,0,0,0,0,0,0,0],"loss":1.0,"compute_time_ms":1.0,"batch_size":1}'
        push = http.post(
            f"/v1/tasks/{granted[0]}/result",
            content=np.zeros(num_params, "<f4").tobytes(),
            headers={**headers, "Content-Type": "application/octet-stream", "Fleet-Meta": meta},
        )
        assert push.status_code == 410  # a declined task's gradient is not applied later
        stats = http.get("/v1/admin/stats", headers={"Authorization": "Bearer test-admin-token"}).json()
        assert stats["declines"] == {reason: len(granted) + 1}

        # terms it can run again: the same device trains
        strategy.terms_for = own_terms
        worker.config = replace(worker.config, max_tasks=1, max_seconds=30)
        assert worker.run().tasks == 1


def test_a_decline_names_its_task_and_device(make_api):
    api = make_api()
    owner, other = api.enroll(), api.enroll("Pixel 4")
    task_id = api.task(owner).json()["task_id"]
    body = {"reason": "terms_unrunnable", "detail": "no such mechanism"}
    assert api.http.post(f"/v1/tasks/{task_id}/decline", json=body, headers=other).status_code == 403
    assert api.http.post("/v1/tasks/nope/decline", json=body, headers=owner).status_code == 404
    for bad in ({"reason": "Not A Code"}, {"reason": ""}, {"reason": "x", "detail": "a\x00b"}):
        assert api.http.post(f"/v1/tasks/{task_id}/decline", json=bad, headers=owner).status_code == 422
    assert api.http.post(f"/v1/tasks/{task_id}/decline", json=body, headers=owner).status_code == 204


def test_backoff_stays_finite_after_any_number_of_declines(tmp_path):
    worker = Worker(WorkerConfig(base_url="http://x", enrollment_key="k", data=DeviceData(
        np.zeros((4, 1, 28, 28), np.uint8), np.zeros(4, np.int64))))  # fmt: skip
    assert all(0 < worker._backoff(n) <= worker.config.backoff_max for n in (1, 1025, 10**6))
