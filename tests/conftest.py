"""Shared fixtures: a coordinator app on a fresh database, enrolled devices, and push helpers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

ENROLL, ADMIN = "test-enrollment-key", "test-admin-token"
FEATURES = {"available_memory": 1e9, "total_memory": 4e9, "temperature": None, "cpu_freq_sum": 8000.0}


def postgres_url() -> str | None:
    """The PostgreSQL URL for storage tests: required when CI=true, skipped elsewhere if unreachable."""
    url = os.environ.get("FLEET_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), connect_timeout=3):
            pass
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL unreachable at {url} with CI=true: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {url} ({exc}); set FLEET_TEST_DATABASE_URL")
    return url


def reset_postgres(url: str) -> None:
    from sqlalchemy import text

    from server.store.database import make_engine

    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    url = postgres_url()
    assert url is not None
    reset_postgres(url)
    return url


def settings_for(tmp_path, **overrides: Any):
    from server.settings import Settings

    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "enrollment_key": ENROLL,
        "admin_token": ADMIN,
        "eval_data": None,
        "rate_limit_per_second": 1000.0,
        "rate_limit_burst": 1000,
    }
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


@pytest.fixture
def make_api(tmp_path) -> Iterator[Any]:
    """Factory: ``make_api(**settings)`` → an Api over a fresh app (closed at teardown)."""
    import warnings

    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

    from server.api.app import create_app

    clients = []

    def make(**overrides: Any) -> Api:
        client = TestClient(create_app(settings_for(tmp_path, **overrides)))
        client.__enter__()
        clients.append(client)
        return Api(client)

    yield make
    for client in clients:
        client.__exit__(None, None, None)
