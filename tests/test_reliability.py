"""Faults under load: a database that goes away answers 503 with Retry-After (never 500) and the
coordinator recovers by itself; a SIGKILLed coordinator loses nothing it acknowledged. Short versions
of `python -m lab run chaos` (docs/results/reliability.md has the long ones)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from server.core.errors import StorageUnavailable
from tests.conftest import settings_for
from tests.support.chaos import kill_phase, outage_phase
from tests.support.postgres import postgres_outage, postgres_server_url


@pytest.fixture
def postgres_database():
    from tests.conftest import fresh_postgres_database, postgres_url

    with fresh_postgres_database(postgres_url()) as url:
        yield url


def _healthy(phase: dict) -> None:
    assert phase["answers_5xx_not_503"] == 0, phase["server_errors"]
    assert phase["missing_retry_after"] == 0
    assert phase["acknowledged"] > 100
    assert phase["acknowledged_not_stored"] == 0 and phase["versions_made_twice"] == 0
    assert phase["answer_changed"] == 0 and phase["exactly_once"]


@pytest.mark.postgres
def test_the_store_says_unavailable_when_the_database_refuses_connections(tmp_path, postgres_database):
    from server.compose import build_coordinator

    coordinator = build_coordinator(settings_for(tmp_path, database_url=postgres_database))
    with postgres_outage(postgres_database), pytest.raises(StorageUnavailable):
        coordinator.store.ping()
    coordinator.store.ping()
    coordinator.close()


@pytest.mark.postgres
def test_an_outage_answers_503_with_retry_after_and_the_coordinator_recovers(tmp_path, postgres_database):
    import warnings

    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

    from server.api.app import create_app
    from tests.conftest import ENROLL, Api

    with TestClient(create_app(settings_for(tmp_path, database_url=postgres_database))) as http:
        api = Api(http)
        device = api.enroll()
        n = api.coordinator.run.manifest.num_params
        with postgres_outage(postgres_database):
            enrolled = http.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "X"})
            assert enrolled.status_code == 503 and int(enrolled.headers["Retry-After"]) >= 1
            assert enrolled.json()["reason"] == "storage_unavailable"
            task = api.task(device, [1] * 10)
            assert task.status_code == 201  # granted from memory: its push cannot be made durable
            pushed = api.push(device, task.json()["task_id"], np.zeros(n, np.float32))
            assert pushed.status_code == 503 and int(pushed.headers["Retry-After"]) >= 1
            refused = api.task(device, [1] * 10)  # the failed commit put the coordinator on hold
            assert refused.status_code == 503 and refused.json()["reason"] == "storage_unavailable"
        deadline = time.monotonic() + 30
        while (task := api.task(device, [1] * 10)).status_code != 201:
            assert task.status_code == 503 and time.monotonic() < deadline, task.text
            time.sleep(0.2)
        assert api.push(device, task.json()["task_id"], np.zeros(n, np.float32)).status_code == 200


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path):
    phase = kill_phase(tmp_path / "kill", database_url=None, devices=8, seconds=12, kills=2)
    _healthy(phase)
    assert len(phase["kills"]) == 2 and phase["connection_errors"] > 0


@pytest.mark.slow
@pytest.mark.postgres
def test_a_database_outage_under_load_answers_503_only_and_loses_nothing(tmp_path, postgres_database):
    phase = outage_phase(
        tmp_path / "outage", database_url=postgres_database, devices=8, seconds=14, outages=1, outage_s=3.0
    )
    _healthy(phase)
    assert phase["answers_503"] > 0 and phase["coordinator_survived"]


def test_server_url_default_is_local():
    assert postgres_server_url().startswith("postgresql://")
