"""schemathesis against a live coordinator (its served /openapi.json, device and admin tokens, every
operation): no 5xx, and every status, content type, header and body as documented. Then, one regression
test per fault the fuzzer found (each was a 500 before its fix)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from models.manifest import builtin
from server.api.schemas import MAX_VERSION
from tests.conftest import ADMIN, ENROLL, FEATURES
from tests.processes import ServerProcess
from tests.support.fuzz import CHECKS, fuzz_live
from tests.test_openapi import STATUSES  # every documented operation

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path, database_url):
    result = fuzz_live(
        tmp_path / "server", database_url=database_url, max_examples=10, server_cls=ServerProcess
    )
    assert result["failures"] == [], json.dumps(result["failures"], indent=1)
    assert result["server_errors"] == 0 and result["server_tracebacks"] == 0
    assert result["errors"] == [] and result["stop_reason"] == "completed"
    assert result["operations"] == len(result["cases_per_operation"]) == len(STATUSES)  # all called
    statuses = result["statuses_per_operation"]
    # the credentials worked: a device got tasks, the admin got answers (not only 401s)
    assert statuses["POST /v1/tasks"].get(201, 0) > 0
    assert statuses["GET /v1/admin/stats"].get(200, 0) > 0
    assert statuses["GET /v1/admin/privacy/calibrate"].get(200, 0) > 0  # σ calibrated for fuzzed targets
    assert statuses["POST /v1/tasks/{task_id}/result"].get(422, 0) > 0  # the push route's forms were sent
    assert set(CHECKS) >= {"not_a_server_error", "status_code_conformance", "response_schema_conformance"}


@pytest.fixture
def api(make_api):
    return make_api()


def test_label_counts_beyond_int64_are_refused_as_input(api):
    """Found by schemathesis: a JSON integer above int64 in label_counts was a 500 (numpy overflow)."""
    headers = api.enroll()
    huge = [5] * 9 + [-(2**200)]
    response = api.http.post("/v1/tasks", json={"features": FEATURES, "label_counts": huge}, headers=headers)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "label_counts", 9]
    task = api.task(headers).json()
    meta = {"label_counts": [2**70] + [0] * 9, "loss": 1.0, "compute_time_ms": 5.0, "batch_size": 2**70}
    gradient = np.zeros(api.coordinator.run.manifest.num_params, "<f4")
    pushed = api.push(headers, task["task_id"], gradient, meta=meta)
    assert pushed.status_code == 422
    assert {tuple(e["loc"]) for e in pushed.json()["detail"]} == {
        ("body", "meta", "label_counts", 0),
        ("body", "meta", "batch_size"),
    }
    assert api.task(headers).status_code == 201  # the coordinator is unharmed


def test_versions_beyond_the_stored_range_are_refused_as_input(api):
    """Found by schemathesis: a version above the database's integer range was a 500 (params, inference);
    a stop criterion beyond it would fail the journal's commit on PostgreSQL."""
    model_id = api.http.get("/v1/models/active").json()["model_id"]
    for url in (
        f"/v1/models/{model_id}/versions/{2**100}/params",
        f"/v1/models/{model_id}/versions/{MAX_VERSION + 1}/params",
        f"/v1/models/{model_id}/inference.onnx?version={2**100}",
        f"/v1/models/{model_id}/inference.onnx?version={MAX_VERSION + 1}",
    ):
        response = api.http.get(url)
        assert response.status_code == 422, (url, response.text)
    assert api.http.get(f"/v1/models/{model_id}/versions/{MAX_VERSION}/params").status_code == 404
    stop = api.http.put(
        "/v1/admin/training/stop", json={"max_versions": MAX_VERSION + 1}, headers=ADMIN_HEADERS
    )
    assert stop.status_code == 422
    stop = api.http.put("/v1/admin/training/stop", json={"max_versions": MAX_VERSION}, headers=ADMIN_HEADERS)
    assert stop.status_code == 204
    assert api.http.get("/v1/admin/stats", headers=ADMIN_HEADERS).status_code == 200


def test_text_with_a_nul_character_is_refused_as_input(api):
    """Found by schemathesis on PostgreSQL: its text cannot hold NUL, so a model id, task id or device model
    with one was a 500 there; now a 422 on either database, and an unknown id is still a 404."""
    headers = api.enroll()
    model_id = api.http.get("/v1/models/active").json()["model_id"]
    nul = "a%00b"
    for response in (
        api.http.get(f"/v1/models/{nul}"),
        api.http.get(f"/v1/models/{nul}/versions/0/params"),
        api.http.get(f"/v1/models/{nul}/inference.onnx"),
        api.http.get(f"/v1/admin/profiler/{nul}", headers=ADMIN_HEADERS),
        api.http.get(f"/v1/admin/records?model_id={nul}", headers=ADMIN_HEADERS),
        api.push(headers, nul, np.zeros(3, "<f4")),
        api.http.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "a\x00b"}),
    ):
        assert response.status_code == 422, (response.request.url, response.text)
        assert isinstance(response.json()["detail"], list)
    assert api.http.get("/v1/models/ab").status_code == 404
    assert api.push(headers, "ab", np.zeros(3, "<f4")).status_code == 404
    assert api.http.get(f"/v1/models/{model_id}").status_code == 200


@pytest.mark.parametrize("name", ["x" * 121, "a\x00b", "tab\tname"])
def test_a_bundle_name_the_store_cannot_hold_is_an_invalid_bundle(api, name):
    """A manifest name over the models table's 120 characters (or with a control character) was a 500 on
    PostgreSQL at upload; it is an invalid bundle (422) and the active model stays."""
    bundle = builtin("mlp")
    zipped = dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest, name=name)).to_zip()
    active = api.http.get("/v1/models/active").json()["model_id"]
    response = api.http.post(
        "/v1/admin/models", headers=ADMIN_HEADERS, files={"bundle": ("m.zip", zipped, "application/zip")}
    )
    assert response.status_code == 422 and "name must be at most 120" in response.json()["detail"]
    assert api.http.get("/v1/models/active").json()["model_id"] == active
