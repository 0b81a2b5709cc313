"""Model push/pull, caching, inference export, lifecycle and operations endpoints."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from models.manifest import builtin
from tests.conftest import ADMIN

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def test_params_are_immutable_and_cacheable(make_api):
    api = make_api()
    info = api.http.get("/v1/models/active").json()
    url = f"/v1/models/{info['model_id']}/versions/0/params"
    response = api.http.get(url)
    assert response.status_code == 200 and response.headers["content-type"] == "application/octet-stream"
    assert "immutable" in response.headers["cache-control"]
    params = np.frombuffer(response.content, "<f4")
    assert np.array_equal(params, builtin("mnist_cnn").init_params)
    assert api.http.get(url, headers={"If-None-Match": response.headers["etag"]}).status_code == 304
    assert api.http.get(f"/v1/models/{info['model_id']}/versions/99/params").status_code == 404
    manifest = api.http.get(f"/v1/models/{info['model_id']}/manifest").json()
    assert manifest["num_params"] == info["num_params"] == params.size


def test_a_pull_from_memory_is_the_routes_answer(make_api, monkeypatch):
    """server/api/hotpull.py answers a cached version's pull before routing: the same status, body and
    headers as the params route, which still answers everything else (conditional, float16, storage)."""
    from server.api import hotpull

    api = make_api()
    model_id = api.coordinator.run.model_id
    url = f"/v1/models/{model_id}/versions/0/params"
    fast = api.http.get(url)
    monkeypatch.setattr(hotpull.ParamsFromMemory, "_cached", lambda self, scope: None)  # always the route
    routed = api.http.get(url)
    monkeypatch.undo()
    assert fast.status_code == routed.status_code == 200 and fast.content == routed.content
    assert sorted(fast.headers.items()) == sorted(routed.headers.items())
    assert api.http.get(url, headers={"If-None-Match": fast.headers["etag"]}).status_code == 304
    half = api.http.get(url + "?encoding=float16")
    assert half.status_code == 200 and len(half.content) == len(fast.content) // 2
    assert api.http.get(f"/v1/models/{model_id}/versions/00/params").content == fast.content
    assert api.http.get(f"/v1/models/{model_id}/versions/-1/params").status_code == 422
    assert api.http.get(f"/v1/models/{model_id}/versions/99/params").status_code == 404
    api.coordinator.catalog._params.clear()  # not in memory: the route reads storage
    assert api.http.get(url).content == fast.content


def test_old_versions_fall_out_of_retention_with_410(storage_make_api):
    api = storage_make_api(version_retention=2)
    headers = api.enroll()
    n = api.coordinator.run.manifest.num_params
    for _ in range(4):
        task = api.task(headers).json()
        assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
    model_id = api.coordinator.run.model_id
    api.coordinator.catalog._params.clear()  # force the database path
    assert api.http.get(f"/v1/models/{model_id}/versions/1/params").status_code == 410
    assert api.http.get(f"/v1/models/{model_id}/versions/4/params").status_code == 200
    assert api.http.get(f"/v1/models/{model_id}/versions/0/params").status_code == 200
    assert [v["version"] for v in api.http.get(f"/v1/models/{model_id}/versions").json()] == [0, 3, 4]


def test_inference_export_is_one_onnx_file_with_weights(make_api):
    api = make_api()
    model_id = api.coordinator.run.model_id
    data = api.http.get(f"/v1/models/{model_id}/inference.onnx").content
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]
    x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    logits = session.run(None, {"x": x})[0]
    assert logits.shape == (3, 10)
    bundle = builtin("mnist_cnn")
    reference = ort.InferenceSession(bundle.infer_onnx, providers=["CPUExecutionProvider"])
    expected = reference.run(None, {**bundle.manifest.split(bundle.init_params), "x": x})[0]
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)


def test_admin_pushes_a_new_model_which_becomes_active(storage_make_api):
    api = storage_make_api()
    first = api.coordinator.run.model_id
    zipped = builtin("mlp").to_zip()
    response = api.http.post(
        "/v1/admin/models", headers=ADMIN_HEADERS, files={"bundle": ("mlp.zip", zipped, "application/zip")}
    )
    assert response.status_code == 201, response.text
    info = response.json()
    assert info["active"] and info["num_params"] == 101_770
    listed = {m["model_id"]: m for m in api.http.get("/v1/models").json()}
    assert not listed[first]["active"] and listed[info["model_id"]]["active"]
    assert api.http.get(f"/v1/models/{first}/versions/0/params").status_code == 200  # still downloadable
    headers = api.enroll()
    assert api.task(headers).json()["model_id"] == info["model_id"]
    bad = api.http.post("/v1/admin/models", headers=ADMIN_HEADERS, files={"bundle": ("x.zip", b"nope", "x")})
    assert bad.status_code == 422 and "zip" in bad.json()["detail"]


def test_pause_resume_and_stop_criterion(make_api):
    api = make_api()
    headers = api.enroll()
    n = api.coordinator.run.manifest.num_params
    assert api.http.post("/v1/admin/training/pause", headers=ADMIN_HEADERS).status_code == 204
    paused = api.task(headers)
    assert paused.status_code == 503 and paused.json()["reason"] == "paused"
    assert int(paused.headers["Retry-After"]) >= 1
    assert api.http.post("/v1/admin/training/resume", headers=ADMIN_HEADERS).status_code == 204
    response = api.http.put("/v1/admin/training/stop", headers=ADMIN_HEADERS, json={"max_versions": 2})
    assert response.status_code == 204
    for _ in range(2):
        task = api.task(headers).json()
        assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
    finished = api.task(headers)
    assert finished.status_code == 410 and finished.json()["reason"] == "training_finished"


def test_target_accuracy_finishes_training(make_api):
    api = make_api(target_accuracy=0.5)
    run = api.coordinator.run
    api.coordinator.record_evaluation(run.model_id, run.version, 0.4, 1.0)
    assert run.status == "training"
    api.coordinator.record_evaluation(run.model_id, run.version, 0.6, 0.9)
    assert run.status == "finished"
    assert api.task(api.enroll()).json()["reason"] == "training_finished"
    evaluations = api.http.get("/v1/admin/evaluations", headers=ADMIN_HEADERS).json()
    assert [e["accuracy"] for e in evaluations] == [0.4, 0.6]


def test_health_ready_metrics_and_docs(make_api):
    api = make_api()
    assert api.http.get("/v1/health").json() == {"status": "ok"}
    assert api.http.get("/v1/ready").json()["status"] == "ready"
    headers = api.enroll()
    task = api.task(headers).json()
    api.push(headers, task["task_id"], np.full(api.coordinator.run.manifest.num_params, 1e-3))
    text = api.http.get("/metrics").text
    assert "fleet_tasks_granted_total 1.0" in text and "fleet_model_updates_total 1.0" in text
    assert "fleet_model_version 1.0" in text
    assert api.http.get("/docs").status_code == 200
    assert "/v1/tasks/{task_id}/result" in api.http.get("/openapi.json").json()["paths"]


def test_controller_rejects_small_batches_with_retry_after(make_api):
    api = make_api(size_drop=0.5)
    coordinator = api.coordinator
    coordinator.admission.min_history = 5
    coordinator.admission.sizes.extend([100] * 20)  # every recent request asked for L = 100
    headers = api.enroll()
    response = api.task(headers)  # the prior gives this device L = SLO / 20 ms = 50 < median 100
    assert response.status_code == 503, response.text
    assert response.json()["reason"] == "small_batch" and response.json()["retry_after"] > 0
    stats = api.http.get("/v1/admin/stats", headers=ADMIN_HEADERS).json()
    assert stats["rejections"] == {"small_batch": 1}


def test_push_after_training_finished_tells_the_device_to_stop(make_api):
    api = make_api()
    headers = api.enroll()
    n = api.coordinator.run.manifest.num_params
    open_task = api.task(headers).json()
    api.http.put("/v1/admin/training/stop", headers=ADMIN_HEADERS, json={"max_versions": 1})
    done = api.task(headers).json()
    assert api.push(headers, done["task_id"], np.full(n, 1e-3)).status_code == 200  # reaches version 1
    late = api.push(headers, open_task["task_id"], np.full(n, 1e-3))
    assert late.status_code == 410 and late.json()["reason"] == "training_finished"
    assert api.coordinator.run.version == 1


def test_float16_pull_and_push_halve_the_bytes(make_api):
    learning_rate = 0.05
    api = make_api(strategy="dynsgd", learning_rate=learning_rate)  # the plain step γ·w·G (no warm-up)
    model_id = api.coordinator.run.model_id
    full = api.http.get(f"/v1/models/{model_id}/versions/0/params")
    half = api.http.get(f"/v1/models/{model_id}/versions/0/params", params={"encoding": "float16"})
    assert len(half.content) * 2 == len(full.content) and half.headers["etag"] != full.headers["etag"]
    np.testing.assert_allclose(
        np.frombuffer(half.content, "<f2"), np.frombuffer(full.content, "<f4"), atol=1e-3
    )
    headers = api.enroll()
    task = api.task(headers).json()
    n = api.coordinator.run.manifest.num_params
    meta = {
        "label_counts": [1] * 10,
        "loss": 1.0,
        "compute_time_ms": 9.0,
        "batch_size": 10,
        "encoding": "float16",
    }
    before = api.coordinator.run.params.copy()
    response = api.push(headers, task["task_id"], np.full(n, 0.5, "<f2").tobytes(), meta=meta)
    assert response.status_code == 200, response.text
    step = before - api.coordinator.run.params
    # every coordinate moved by 0.5 × weight × γ (the gradient decoded from float16 is exactly 0.5)
    expected = 0.5 * response.json()["weight"] * learning_rate
    assert expected > 0
    np.testing.assert_allclose(step, expected, rtol=1e-4)
    odd = api.task(headers).json()
    bad = api.push(headers, odd["task_id"], b"\x00" * 3, meta=meta)
    assert bad.status_code == 422 and "multiple of 2" in bad.json()["detail"]


def test_worker_can_speak_float16(make_api):
    from client import DeviceData, StaticFeatures, Worker, WorkerConfig

    api = make_api()
    rng = np.random.default_rng(0)
    data = DeviceData(rng.random((20, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 20))
    config = WorkerConfig(
        base_url="http://testserver",
        enrollment_key="test-enrollment-key",
        data=data,
        max_tasks=2,
        wire_encoding="float16",
    )
    worker = Worker(
        config, client=api.http, features=StaticFeatures({"total_memory": 4e9}), sleep=lambda s: None
    )
    assert worker.run().tasks == 2
    assert api.coordinator.run.version == 2
