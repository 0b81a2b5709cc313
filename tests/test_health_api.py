"""Issue 29, health over HTTP: /v1/ready stays 200 while degraded (and says why) and is 503 only when the
coordinator cannot serve; /metrics carries the state and one series per reason; the console's Overview
shows the banner and overview.json carries the health in place of ``"degraded": null``."""

from __future__ import annotations

import re
import time

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from server.core.errors import StorageUnavailable
from server.core.health import CODES
from tests.test_console import PASSWORD, USER, login


def gauges(api) -> dict[tuple[str, str], float]:
    """/metrics' health series: (name, code) -> value."""
    found = {}
    for family in text_string_to_metric_families(api.http.get("/metrics").text):
        for sample in family.samples:
            if sample.name.startswith("fleet_health") or sample.name.startswith("fleet_journal"):
                found[(sample.name, sample.labels.get("code", ""))] = sample.value
    return found


def later(coordinator, seconds: float) -> None:
    """Move the coordinator's clock ``seconds`` ahead of the wall clock (its journal keeps its own)."""
    coordinator.clock = lambda: time.time() + seconds


def trained(api) -> dict[str, str]:
    headers = api.enroll()
    task = api.task(headers).json()
    n = api.coordinator.run.manifest.num_params
    assert api.push(headers, task["task_id"], np.zeros(n, np.float32)).status_code == 200
    return headers


def test_ready_is_200_with_the_reasons_while_degraded(make_api):
    api = make_api(initial_model="logreg")
    trained(api)
    body = api.http.get("/v1/ready").json()
    assert body["status"] == "ready" and body["health"] == {"state": "ok", "reasons": []}
    metrics = gauges(api)
    assert metrics[("fleet_health_state", "")] == 0
    assert {code for (name, code), v in metrics.items() if name == "fleet_health_reason"} == set(CODES)

    later(api.coordinator, 31)  # every device worker crashed half a minute ago
    answer = api.http.get("/v1/ready")
    assert answer.status_code == 200  # degraded still serves: a load balancer keeps it
    health = answer.json()["health"]
    assert health["state"] == "degraded" and [r["code"] for r in health["reasons"]] == ["no_pushes"]
    assert re.match(r"No push for 3\d s, with 1 device enrolled", health["reasons"][0]["message"])
    metrics = gauges(api)
    assert metrics[("fleet_health_state", "")] == 1
    assert metrics[("fleet_health_reason", "no_pushes")] == 1
    assert metrics[("fleet_health_reason", "privacy_exhausted")] == 0


def test_ready_is_503_while_storage_is_unavailable(make_api):
    api = make_api(initial_model="logreg")
    store = api.coordinator.store

    def refuse() -> None:
        raise StorageUnavailable("connection refused")

    store.ping = refuse
    answer = api.http.get("/v1/ready")
    assert answer.status_code == 503
    body = answer.json()
    assert body["reason"] == "storage_unavailable" and "connection refused" in body["detail"]
    assert body["health"]["state"] == "down"
    assert gauges(api)[("fleet_health_reason", "storage_unavailable")] == 1
    assert gauges(api)[("fleet_health_state", "")] == 2
    del store.ping  # the instance attribute: the class's ping again
    assert api.http.get("/v1/ready").status_code == 200


def test_ready_is_503_without_a_model(make_api):
    api = make_api(initial_model=None)
    answer = api.http.get("/v1/ready")
    assert answer.status_code == 503 and answer.json()["reason"] == "no_model"
    assert [r["code"] for r in answer.json()["health"]["reasons"]] == ["no_model"]


def test_the_overview_shows_the_health_banner_and_its_json_carries_it(make_api):
    api = make_api(initial_model="logreg", console_user=USER, console_password=PASSWORD)
    trained(api)
    assert login(api.http).status_code == 303
    data = api.http.get("/admin/data/overview.json").json()
    assert "degraded" not in data and data["health"] == {"state": "ok", "reasons": []}
    assert data["health_state"] == "ok" and data["health_summary"] == "Nothing needs attention."
    page = api.http.get("/admin").text
    assert 'data-health="ok"' in page and page.index('data-health="ok"') < page.index('class="cards"')

    later(api.coordinator, 45)
    data = api.http.get("/admin/data/overview.json").json()
    assert data["health"]["state"] == "degraded" and data["health_state"] == "degraded"
    page = api.http.get("/admin").text
    assert 'data-health="degraded"' in page and 'data-codes="no_pushes"' in page
    assert page.index('data-live="health"') < page.index('data-health="degraded"')  # refilled live, class too
    reason = r'<li data-code="no_pushes">No push for 4\d s, with 1 device enrolled and training running.</li>'
    assert re.search(reason, page) and data["health_summary"].startswith("No push for")
