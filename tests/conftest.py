"""Shared fixtures: a coordinator app on a fresh database, enrolled devices, and push helpers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import postgres

ENROLL, ADMIN = "test-enrollment-key", "test-admin-token"
FEATURES = {"available_memory": 1e9, "total_memory": 4e9, "temperature": None, "cpu_freq_sum": 8000.0}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything on PostgreSQL belongs to the slow tier (`make test-all`), wherever it is declared."""
    for item in items:
        if item.get_closest_marker("postgres") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session) -> None:
    postgres.drop_templates()


def postgres_url() -> str:
    """The PostgreSQL server for tests: required when CI=true, skipped elsewhere if unreachable."""
    url = postgres.postgres_server_url()
    problem = postgres.problem(url)
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL unreachable at {url} with CI=true: {problem}")
        pytest.skip(f"PostgreSQL unreachable at {url} ({problem}); set FLEET_TEST_DATABASE_URL")
    return url


fresh_postgres_database = postgres.scratch_database  # a copy of this session's migrated template


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, bytes]:
    """The device worker's tests' model: softmax regression's manifest and ONNX training graph, its loss and
    gradient written out by hand (tests/support/client_doubles.py)."""
    from tests.support.client_doubles import softmax_regression

    return softmax_regression()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """A SQLite file: the database of tests whose subject is not storage."""
    return f"sqlite:///{tmp_path / 'fleet.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Tests whose subject is storage run twice: on a SQLite file and on their own PostgreSQL database
    (the latter in the slow tier)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fleet.db'}"
        return
    with fresh_postgres_database(postgres_url()) as url:
        yield url


def settings_for(tmp_path: Path, **overrides: Any):
    from server.settings import Settings

    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "enrollment_key": ENROLL,
        "admin_token": ADMIN,
        "eval_data": None,
        "rate_limit_per_second": 1000.0,
        "rate_limit_burst": 1000,
    }
    if "strategy" not in overrides:  # the default buffers K = 5 gradients; these tests step on each push
        values["k"] = 1
    values.update(overrides)
    return Settings(**values)


@dataclass
class Api:
    """A TestClient with the calls tests repeat."""

    http: Any

    @property
    def coordinator(self):
        return self.http.app.state.coordinator

    def enroll(self, device_model: str = "Galaxy S7") -> dict[str, str]:
        response = self.http.post(
            "/v1/devices", json={"enrollment_key": ENROLL, "device_model": device_model}
        )
        assert response.status_code == 201, response.text
        return {"Authorization": f"Bearer {response.json()['token']}"}

    def task(self, headers: dict[str, str], counts: list[int] | None = None) -> Any:
        return self.http.post(
            "/v1/tasks", json={"features": FEATURES, "label_counts": counts or [5] * 10}, headers=headers
        )

    def push(
        self,
        headers: dict[str, str],
        task_id: str,
        gradient: np.ndarray | bytes,
        meta: dict[str, Any] | str | None = None,
    ) -> Any:
        meta = (
            meta
            if meta is not None
            else {
                "label_counts": [1] * 10,
                "loss": 2.0,
                "compute_time_ms": 50.0,
                "energy": 0.001,
                "batch_size": 10,
            }
        )
        body = meta if isinstance(meta, str) else json.dumps(meta)
        data = gradient if isinstance(gradient, bytes) else np.asarray(gradient, "<f4").tobytes()
        return self.http.post(
            f"/v1/tasks/{task_id}/result",
            headers=headers,
            files={
                "meta": (None, body, "application/json"),
                "gradient": ("g.bin", data, "application/octet-stream"),
            },
        )


def _api_factory(tmp_path: Path, database_url: str) -> Iterator[Any]:
    import warnings

    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

    from server.api.app import create_app

    clients = []

    def make(**overrides: Any) -> Api:
        settings = settings_for(tmp_path, **{"database_url": database_url, **overrides})
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return Api(client)

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def make_api(tmp_path: Path, database_url: str) -> Iterator[Any]:
    """Factory: ``make_api(**settings)`` → an Api over a fresh app on SQLite (closed at teardown)."""
    yield from _api_factory(tmp_path, database_url)


@pytest.fixture
def storage_make_api(tmp_path: Path, storage_url: str) -> Iterator[Any]:
    """``make_api`` over ``storage_url``: for API tests whose subject is what storage keeps."""
    yield from _api_factory(tmp_path, storage_url)
