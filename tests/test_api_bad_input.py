"""Every bad input gets a clear 4xx, and the model, its version and the stored state do not change."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from sqlalchemy import func, select

from server.store.tables import MeasurementRow, StrategyRow, TaskRow, VersionRow


def stored_state(api) -> tuple:
    coordinator = api.coordinator
    coordinator.journal.flush()  # grants are written behind the answer; compare what is stored
    with coordinator.store.sessions() as session:
        versions = session.scalar(select(func.count()).select_from(VersionRow))
        answered = session.scalar(
            select(func.count()).select_from(TaskRow).where(TaskRow.status == "applied")
        )
        measurements = session.scalar(select(func.count()).select_from(MeasurementRow))
        strategy = session.scalar(select(StrategyRow.state))
    run = coordinator.run
    return run.version, run.params.tobytes(), versions, answered, measurements, strategy


@pytest.fixture
def api(make_api):
    return make_api(max_gradient_norm=100.0, max_body_bytes=300_000)


@pytest.fixture
def granted(api):
    headers = api.enroll()
    response = api.task(headers)
    assert response.status_code == 201, response.text
    return headers, response.json()


def n_params(api) -> int:
    return api.coordinator.run.manifest.num_params


def detail_text(response) -> str:
    """The error's words: ``detail`` is a sentence, or FastAPI's list of ``{"loc", "msg", "type"}``."""
    detail = response.json()["detail"]
    return detail if isinstance(detail, str) else " ".join(error["msg"] for error in detail)


def assert_refused(api, response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert words in detail_text(response)


def test_valid_push_changes_state(api, granted):
    """The control case: the same helpers with a valid body do move the model."""
    headers, task = granted
    before = stored_state(api)
    response = api.push(headers, task["task_id"], np.full(n_params(api), 0.01))
    assert response.status_code == 200, response.text
    assert stored_state(api)[0] == before[0] + 1


@pytest.mark.parametrize(
    ("make_gradient", "words"),
    [
        (lambda n: np.zeros(n - 1), "float32 values"),
        (lambda n: np.r_[np.zeros(n - 1), np.nan], "NaN or Inf"),
        (lambda n: np.r_[np.zeros(n - 1), np.inf], "NaN or Inf"),
        (lambda n: np.full(n, 10.0), "exceeds the bound"),
    ],
)
def test_bad_gradient_is_refused(api, granted, make_gradient, words):
    headers, task = granted
    before = stored_state(api)
    assert_refused(api, api.push(headers, task["task_id"], make_gradient(n_params(api))), 422, words)
    assert stored_state(api) == before


def test_gradient_bytes_not_a_multiple_of_four(api, granted):
    headers, task = granted
    before = stored_state(api)
    assert_refused(api, api.push(headers, task["task_id"], b"\x00" * 7), 422, "multiple of 4")
    assert stored_state(api) == before


@pytest.mark.parametrize(
    ("meta", "words"),
    [
        ("{not json", "not valid JSON"),
        ({"label_counts": [1] * 10, "loss": 1.0}, "Field required"),
        ({"label_counts": [1] * 9, "loss": 1.0, "compute_time_ms": 5.0, "batch_size": 9}, "label_counts"),
        (
            {"label_counts": [1] * 10, "loss": 1.0, "compute_time_ms": 5.0, "batch_size": 3},
            "sum to batch_size",
        ),
    ],
)
def test_malformed_meta_is_refused(api, granted, meta, words):
    headers, task = granted
    before = stored_state(api)
    assert_refused(api, api.push(headers, task["task_id"], np.zeros(n_params(api)), meta=meta), 422, words)
    assert stored_state(api) == before


def test_malformed_multipart_is_refused(api, granted):
    headers, task = granted
    before = stored_state(api)
    response = api.http.post(
        f"/v1/tasks/{task['task_id']}/result",
        headers={**headers, "Content-Type": "multipart/form-data; boundary=xyz"},
        content=b"--xyz\r\ngarbage",
    )
    assert response.status_code == 422, response.text
    missing = api.http.post(
        f"/v1/tasks/{task['task_id']}/result",
        headers=headers,
        files={"meta": (None, "{}", "application/json")},
    )
    assert_refused(api, missing, 422, "'gradient' is missing")
    not_multipart = api.http.post(f"/v1/tasks/{task['task_id']}/result", headers=headers, json={})
    assert not_multipart.status_code == 415
    assert stored_state(api) == before


def test_raw_push_needs_valid_meta_header(api, granted):
    headers, task = granted
    before = stored_state(api)
    url = f"/v1/tasks/{task['task_id']}/result"
    raw = {**headers, "Content-Type": "application/octet-stream"}
    body = np.zeros(n_params(api), "<f4").tobytes()
    assert_refused(api, api.http.post(url, headers=raw, content=body), 422, "Fleet-Meta header is missing")
    bad = api.http.post(url, headers={**raw, "Fleet-Meta": "{not json"}, content=body)
    assert_refused(api, bad, 422, "not valid JSON")
    assert stored_state(api) == before
    meta = {"label_counts": [1] * 10, "loss": 1.0, "compute_time_ms": 5.0, "energy": None, "batch_size": 10}
    good = api.http.post(url, headers={**raw, "Fleet-Meta": json.dumps(meta)}, content=body)
    assert good.status_code == 200, good.text


def test_oversized_body_is_refused(api, granted):
    headers, task = granted
    before = stored_state(api)
    assert_refused(api, api.push(headers, task["task_id"], np.zeros(100_000)), 413, "exceeds")
    assert stored_state(api) == before


def test_unknown_task_is_404(api, granted):
    headers, _ = granted
    before = stored_state(api)
    assert_refused(api, api.push(headers, "no-such-task", np.zeros(n_params(api))), 404, "no task")
    assert stored_state(api) == before


def test_foreign_task_is_403(api, granted):
    _, task = granted
    other = api.enroll("Pixel 7")
    before = stored_state(api)
    assert_refused(api, api.push(other, task["task_id"], np.zeros(n_params(api))), 403, "another device")
    assert stored_state(api) == before


def test_expired_task_is_410(make_api):
    api = make_api(lease_seconds=0.05)
    headers = api.enroll()
    task = api.task(headers).json()
    time.sleep(0.1)
    before = stored_state(api)
    assert_refused(api, api.push(headers, task["task_id"], np.zeros(n_params(api))), 410, "lease expired")
    assert stored_state(api) == before


def test_same_body_retry_returns_original_and_different_body_is_409(api, granted):
    headers, task = granted
    gradient = np.full(n_params(api), 0.01)
    first = api.push(headers, task["task_id"], gradient)
    after_first = stored_state(api)
    retry = api.push(headers, task["task_id"], gradient)
    assert retry.status_code == 200
    assert {**retry.json(), "duplicate": False} == first.json() and retry.json()["duplicate"] is True
    assert_refused(api, api.push(headers, task["task_id"], gradient * 2), 409, "different body")
    assert stored_state(api) == after_first


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (None, "missing bearer token"),
        ("Basic abc", "missing bearer token"),  # not a Bearer credential: as if none were sent
        ("Bearer wrong-token", "unknown device token"),
    ],
)
def test_missing_or_wrong_token_is_401(api, granted, header, words):
    """401 (not 403: the caller is not authenticated at all) with a Bearer challenge, on push and task."""
    _, task = granted
    before = stored_state(api)
    headers = {"Authorization": header} if header else {}
    push = api.push(headers, task["task_id"], np.zeros(n_params(api)))
    request = api.http.post("/v1/tasks", json={"label_counts": [1] * 10}, headers=headers)
    for response in (push, request):
        assert_refused(api, response, 401, words)
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert stored_state(api) == before


def test_wrong_enrollment_key_is_401(api):
    response = api.http.post("/v1/devices", json={"enrollment_key": "nope", "device_model": "X"})
    assert_refused(api, response, 401, "enrollment key")


def test_admin_routes_need_the_admin_token(api):
    device = api.enroll()
    assert api.http.post("/v1/admin/training/pause").status_code == 401
    assert api.http.post("/v1/admin/training/pause", headers=device).status_code == 403
    assert api.coordinator.run.status == "training"


def test_rate_limit_is_429_with_retry_after(make_api):
    api = make_api(rate_limit_per_second=0.5, rate_limit_burst=2)
    headers = api.enroll()
    codes = [api.task(headers).status_code for _ in range(3)]
    assert codes[:2] == [201, 201] and codes[2] == 429
    response = api.task(headers)
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
    assert "rate limit" in response.json()["detail"]


def test_bad_task_request_is_422(api):
    headers = api.enroll()
    for body in (
        {"label_counts": [1] * 3},
        {"label_counts": [-1] * 10},
        {"features": {"bogus": 1}, "label_counts": [1] * 10},
    ):
        response = api.http.post("/v1/tasks", json=body, headers=headers)
        assert response.status_code == 422, (body, response.text)
