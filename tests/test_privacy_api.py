"""DP through the REST API (SQLite and PostgreSQL): the terms in a grant, a device's own ε, the admin's
view, calibration, /metrics, bad reports refused with 422 and never charged (N strictly an integer:
"6000" and true were coerced, finding 12), budget exhaustion."""

from __future__ import annotations

import pytest

from fleet_protocol.accounting import PrivacyEvent
from tests.conftest import ADMIN, FEATURES
from tests.test_privacy_ledger import reference_epsilon

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def ask(api, headers, examples=192):  # bucket_examples(200): DP reports a bucket
    body = {"features": FEATURES, "local_examples": examples}  # under DP: no label counts
    return api.http.post("/v1/tasks", json=body, headers=headers)


@pytest.fixture
def dp_api(make_api):
    # mlp: the built-ins carry a DP graph; σ 3, budget 2: 4 tasks at q = 48/192 fit (ε 0.97 after one,
    # PLD under replace-one at δ = 1e-8)
    return make_api(
        dp=True,
        dp_noise_multiplier=3.0,
        dp_epsilon_budget=2.0,
        initial_model="mlp",
        min_batch=48,
        max_batch=48,
    )


def test_a_dp_grant_carries_its_terms_and_the_device_sees_its_epsilon(dp_api):
    device = dp_api.enroll()
    grant = ask(dp_api, device)
    assert grant.status_code == 201, grant.text
    dp = grant.json()["dp"]
    assert (
        dp["mechanism"] == "dpsgd-poisson-gaussian/1" and dp["clip"] == 1.0 and dp["noise_multiplier"] == 3.0
    )
    assert dp["graph_url"].endswith("/graphs/dp.onnx") and dp["sampling_rate"] == pytest.approx(0.25)
    graph = dp_api.http.get(dp["graph_url"])
    assert graph.status_code == 200 and len(graph.content) > 1000
    mine = dp_api.http.get("/v1/privacy/me", headers=device).json()
    assert mine["tasks"] == 1 and mine["epsilon"] == pytest.approx(dp["epsilon_after"])
    assert mine["epsilon"] == pytest.approx(reference_epsilon([PrivacyEvent(3.0, 0.25)], 1e-8), rel=1e-6)
    assert "replace-one" in mine["assumption"] and mine["delta"] == dp["delta"] == 1e-8
    overview = dp_api.http.get("/v1/admin/privacy", headers=ADMIN_HEADERS).json()
    assert overview["epsilon_max"] == pytest.approx(mine["epsilon"]) and len(overview["devices"]) == 1
    assert dp_api.http.get("/v1/admin/privacy", headers=device).status_code == 403
    one = dp_api.http.get(f"/v1/admin/privacy/devices/{mine['device_id']}", headers=ADMIN_HEADERS)
    assert one.status_code == 200 and one.json()["epsilon"] == pytest.approx(mine["epsilon"])
    assert dp_api.http.get("/v1/admin/privacy/devices/nobody", headers=ADMIN_HEADERS).status_code == 404
    metrics = dp_api.http.get("/metrics").text
    assert f"fleet_privacy_epsilon_max {mine['epsilon']}"[:30] in metrics


def test_the_budget_stops_the_device_with_a_clear_reason(dp_api):
    device = dp_api.enroll()
    codes = [ask(dp_api, device).status_code for _ in range(12)]
    assert 201 in codes and codes[-1] == 503, codes
    refused = ask(dp_api, device)
    assert refused.json()["reason"] == "privacy_budget_exhausted" and "budget" in refused.json()["detail"]
    assert int(refused.headers["Retry-After"]) >= 600
    mine = dp_api.http.get("/v1/privacy/me", headers=device).json()
    assert mine["exhausted"] and mine["epsilon"] <= 2.0 and mine["tasks"] == codes.count(201) == 4
    other = dp_api.enroll("Pixel 8")  # budgets are per device
    assert ask(dp_api, other).status_code == 201


@pytest.mark.parametrize("examples", [0, -1, 1.5, "many", 10**12, "5632", True, 5632.0])
def test_a_bad_local_dataset_size_is_a_422_and_charges_nothing(dp_api, examples):
    device = dp_api.enroll()
    assert ask(dp_api, device, examples).status_code == 422
    missing = dp_api.http.post("/v1/tasks", json={"features": FEATURES}, headers=device)
    assert missing.status_code == 422 and "local_examples" in missing.text
    assert dp_api.http.get("/v1/privacy/me", headers=device).json()["tasks"] == 0


def test_calibration_and_dp_off(make_api, dp_api):
    target = reference_epsilon([PrivacyEvent(2.0, 0.25, 5)], 1e-8)  # σ = 2 reaches it, by dp-accounting
    answer = dp_api.http.get(
        "/v1/admin/privacy/calibrate",
        params={"epsilon": target, "delta": 1e-8, "sampling_rate": 0.25, "steps": 5},
        headers=ADMIN_HEADERS,
    )
    assert answer.status_code == 200 and answer.json()["noise_multiplier"] == pytest.approx(2.0, abs=2e-3)
    assert answer.json()["accountant"] == "pld (replace-one)"
    bad = dp_api.http.get(
        "/v1/admin/privacy/calibrate",
        params={"epsilon": -1, "delta": 1e-5, "sampling_rate": 0.1, "steps": 10},
        headers=ADMIN_HEADERS,
    )
    assert bad.status_code == 422
    plain = make_api()
    device = plain.enroll()
    assert plain.http.get("/v1/privacy/me", headers=device).status_code == 404
    assert plain.task(device).json()["dp"] is None
