"""The API's input contract (issue 12): no 5xx on any number a JSON parser accepts, features within a
physical range, one error shape, rate limits on requests (not pushes), pushed batch sizes bounded by the
grant."""

from __future__ import annotations

import json

import numpy as np
import pytest

from server.core.errors import InvalidInput
from server.core.types import TaskRequest
from tests.conftest import ADMIN, ENROLL, FEATURES

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
JSON = {"Content-Type": "application/json"}
COUNTS = "[5, 5, 5, 5, 5, 5, 5, 5, 5, 5]"


@pytest.fixture
def api(make_api):
    return make_api()


def n_params(api) -> int:
    return api.coordinator.run.manifest.num_params


def raw_push(api, headers: dict[str, str], task_id: str, meta: dict | str):
    """A push as the device client sends it: raw float32 body, meta in the ``Fleet-Meta`` header."""
    return api.http.post(
        f"/v1/tasks/{task_id}/result",
        headers={
            **headers,
            "Content-Type": "application/octet-stream",
            "Fleet-Meta": meta if isinstance(meta, str) else json.dumps(meta),
        },
        content=np.zeros(n_params(api), "<f4").tobytes(),
    )


def strict_json(text: str):
    """Parse as strict JSON: a ``NaN`` or ``Infinity`` token fails the test."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the body"))


def assert_validation_error(response, *fields: str) -> list[dict]:
    """A 422 whose body is strict JSON in FastAPI's shape, naming each of ``fields`` in some ``loc``."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/json")
    detail = json.loads(response.text, parse_constant=lambda name: pytest.fail(f"{name} in the body"))[
        "detail"
    ]
    assert isinstance(detail, list) and detail
    for error in detail:
        assert {"loc", "msg", "type"} <= error.keys(), error
        assert "[{" not in error["msg"], "a Python repr inside a message"
    locs = [[str(part) for part in error["loc"]] for error in detail]
    for field in fields:
        assert any(field in loc for loc in locs), (field, locs)
    return detail


def features_body(**features: str) -> str:
    """A task request with some features spelled as raw JSON tokens (``NaN`` is not valid strict JSON)."""
    parts = [f'"{name}": {value}' for name, value in {**{"cpu_freq_sum": "8000.0"}, **features}.items()]
    return f'{{"features": {{{", ".join(parts)}}}, "label_counts": {COUNTS}}}'


# --- defect 1: NaN / Infinity literals answer a JSON 422 on every route --------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (features_body(available_memory="NaN"), "available_memory"),
        (features_body(temperature="Infinity"), "temperature"),
        (features_body(cpu_freq_sum="-Infinity"), "cpu_freq_sum"),
        (features_body(total_memory="NaN", energy_per_cpu_time="Infinity"), "energy_per_cpu_time"),
        ('{"label_counts": [NaN, 1, 1, 1, 1, 1, 1, 1, 1, 1]}', "label_counts"),
        ('{"label_counts": [Infinity, 1, 1, 1, 1, 1, 1, 1, 1, 1]}', "label_counts"),
        ("NaN", "body"),
    ],
)
def test_non_finite_numbers_in_a_task_request_are_a_json_422(api, body, field):
    headers = api.enroll()
    response = api.http.post("/v1/tasks", content=body, headers={**headers, **JSON})
    detail = assert_validation_error(response, field)
    assert any(error.get("input") in ("NaN", "Infinity", "-Infinity") for error in detail) or field == "body"
    assert api.task(headers).status_code == 201  # the same client goes on working


@pytest.mark.parametrize(
    ("method", "url", "body", "field", "headers"),
    [
        ("PUT", "/v1/admin/training/stop", '{"target_accuracy": NaN}', "target_accuracy", ADMIN_HEADERS),
        ("PUT", "/v1/admin/training/stop", '{"max_versions": Infinity}', "max_versions", ADMIN_HEADERS),
        ("POST", "/v1/devices", f'{{"enrollment_key": "{ENROLL}", "device_model": NaN}}', "device_model", {}),
        ("POST", "/v1/devices", '{"enrollment_key": Infinity, "device_model": "X"}', "enrollment_key", {}),
    ],
)
def test_non_finite_numbers_on_other_routes_are_a_json_422(api, method, url, body, field, headers):
    response = api.http.request(method, url, content=body, headers={**headers, **JSON})
    assert_validation_error(response, field)
    assert api.coordinator.run.status == "training"


def test_non_finite_meta_is_a_json_422(api):
    headers = api.enroll()
    task = api.task(headers).json()
    meta = f'{{"label_counts": {COUNTS}, "loss": NaN, "compute_time_ms": Infinity, "batch_size": 50}}'
    for response in (
        raw_push(api, headers, task["task_id"], meta),
        api.push(headers, task["task_id"], np.zeros(n_params(api)), meta=meta),  # multipart
    ):
        detail = assert_validation_error(response, "loss", "compute_time_ms")
        assert {error["input"] for error in detail} == {"NaN", "Infinity"}


# --- defect 2: features finite and within a physical range; the core guards the profiler too ----------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("cpu_freq_sum", 1e300),
        ("cpu_freq_sum", 2e6),
        ("available_memory", 1e14),
        ("total_memory", -1.0),
        ("temperature", 151.0),
        ("temperature", -51.0),
        ("energy_per_cpu_time", 1e9),
        ("energy_per_cpu_time", -0.1),
    ],
)
def test_features_out_of_physical_range_are_refused(api, name, value):
    headers = api.enroll()
    response = api.http.post(
        "/v1/tasks", json={"features": {**FEATURES, name: value}, "label_counts": [5] * 10}, headers=headers
    )
    assert_validation_error(response, name)


def test_features_at_the_edges_of_their_range_are_granted(api):
    headers = api.enroll()
    edges = {
        "available_memory": 1e13,
        "total_memory": 0.0,
        "temperature": -50.0,
        "cpu_freq_sum": 1e6,
        "energy_per_cpu_time": 0.0,
    }
    response = api.http.post("/v1/tasks", json={"features": edges, "label_counts": [5] * 10}, headers=headers)
    assert response.status_code == 201, response.text
    assert np.isfinite(response.json()["batch_size"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "fast"])
def test_the_core_refuses_non_finite_features_before_the_profiler(api, value, monkeypatch):
    """Whatever adapter builds the request (simulator, another API), the profiler never sees NaN/Inf."""
    coordinator = api.coordinator
    token = api.enroll()["Authorization"].removeprefix("Bearer ")
    device = coordinator.devices.cached(token) or coordinator.devices.authenticate(token)
    seen: list[dict] = []
    monkeypatch.setattr(coordinator.profiler, "batch_size", lambda model, features: seen.append(features))
    request = TaskRequest(device, {**FEATURES, "cpu_freq_sum": value}, np.full(10, 5))
    with pytest.raises(InvalidInput, match="cpu_freq_sum"):
        coordinator.request_task(request)
    assert seen == []


# --- defect 7: task requests and enrollment are rate-limited, pushes are not ---------------------------


def test_pushes_are_not_rate_limited_but_task_requests_are(make_api):
    api = make_api(rate_limit_per_second=0.5, rate_limit_burst=2)
    headers = api.enroll()
    grants = [api.task(headers) for _ in range(2)]
    assert [grant.status_code for grant in grants] == [201, 201]
    over = api.task(headers)
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1, over.text
    gradient = np.full(n_params(api), 1e-3)
    pushes = [api.push(headers, grant.json()["task_id"], gradient) for grant in grants]
    pushes += [api.push(headers, grants[0].json()["task_id"], gradient) for _ in range(4)]  # retries
    assert [push.status_code for push in pushes] == [200] * 6, [push.text for push in pushes]
    assert api.task(headers).status_code == 429  # pushing did not refill (nor drain) the request bucket


def test_enrollment_is_rate_limited_per_client_address(make_api):
    api = make_api(enroll_rate_per_second=0.5, enroll_burst=2)
    body = {"enrollment_key": ENROLL, "device_model": "X"}
    codes = [api.http.post("/v1/devices", json=body).status_code for _ in range(3)]
    assert codes == [201, 201, 429]
    refused = api.http.post("/v1/devices", json=body)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "rate limit" in refused.json()["detail"]


# --- defect 8: a meta schema error is FastAPI's detail list, never a repr in a string --------------------


def test_meta_schema_error_in_the_header_is_a_detail_list(api):
    headers = api.enroll()
    task = api.task(headers).json()
    meta = {"label_counts": [1] * 10, "loss": "low", "batch_size": 10, "colour": "red"}
    detail = assert_validation_error(
        raw_push(api, headers, task["task_id"], meta), "loss", "compute_time_ms", "colour"
    )
    by_field = {error["loc"][-1]: error for error in detail}
    assert by_field["compute_time_ms"]["type"] == "missing"
    assert by_field["colour"]["type"] == "extra_forbidden"
    assert all(error["loc"][:2] == ["header", "Fleet-Meta"] for error in detail)


def test_meta_schema_error_in_a_multipart_part_is_a_detail_list(api):
    headers = api.enroll()
    task = api.task(headers).json()
    files = {
        "meta": (None, json.dumps({"label_counts": [1] * 10, "loss": 1.0}), "application/json"),
        "gradient": ("g", np.zeros(n_params(api), "<f4").tobytes(), "application/octet-stream"),
    }
    response = api.http.post(f"/v1/tasks/{task['task_id']}/result", headers=headers, files=files)
    detail = assert_validation_error(response, "compute_time_ms", "batch_size")
    assert all(error["loc"][:2] == ["body", "meta"] for error in detail)


def test_meta_that_is_not_json_or_missing_is_a_detail_list(api):
    headers = api.enroll()
    task = api.task(headers).json()
    url = f"/v1/tasks/{task['task_id']}/result"
    raw = {**headers, "Content-Type": "application/octet-stream"}
    body = np.zeros(n_params(api), "<f4").tobytes()
    not_json = assert_validation_error(
        api.http.post(url, headers={**raw, "Fleet-Meta": "{oops"}, content=body)
    )
    assert not_json[0]["type"] == "json_invalid" and not_json[0]["loc"] == ["header", "Fleet-Meta"]
    missing = assert_validation_error(api.http.post(url, headers=raw, content=body), "Fleet-Meta")
    assert missing[0]["type"] == "missing"


# --- defect 9: label counts sum to batch_size, which may not exceed the grant -------------------------------


def counts_summing_to(total: int) -> list[int]:
    return [total // 10 + (i < total % 10) for i in range(10)]


def meta_for(batch_size: int, counts: list[int] | None = None) -> dict:
    counts = counts if counts is not None else counts_summing_to(batch_size)
    return {"label_counts": counts, "loss": 1.0, "compute_time_ms": 5.0, "batch_size": batch_size}


def test_a_batch_larger_than_granted_is_refused_with_the_reason(api):
    headers = api.enroll()
    task = api.task(headers).json()
    granted = task["batch_size"]
    gradient = np.full(n_params(api), 1e-3)
    version = api.coordinator.run.version
    response = api.push(headers, task["task_id"], gradient, meta=meta_for(granted + 1))
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == f"batch_size {granted + 1} exceeds the granted batch size {granted}"
    assert api.coordinator.run.version == version
    assert api.push(headers, task["task_id"], gradient, meta=meta_for(granted)).status_code == 200


def test_a_batch_smaller_than_granted_is_accepted(api):
    """A device with fewer examples than granted trains on what it has; I-Prof learns from that size."""
    headers = api.enroll()
    task = api.task(headers).json()
    smaller = max(1, task["batch_size"] - 1)
    response = api.push(headers, task["task_id"], np.full(n_params(api), 1e-3), meta=meta_for(smaller))
    assert response.status_code == 200, response.text


def test_label_counts_must_sum_to_the_batch_size(api):
    headers = api.enroll()
    task = api.task(headers).json()
    granted = task["batch_size"]
    meta = meta_for(granted, counts_summing_to(granted + 1))
    response = api.push(headers, task["task_id"], np.full(n_params(api), 1e-3), meta=meta)
    assert response.status_code == 422 and "sum to batch_size" in response.json()["detail"]
