"""The profiler's admin routes, the MAUI baseline setting, and `fleet profiler bootstrap`."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from fleet.cli import app
from profiler.dispatch import RoundRobinDispatcher
from tests.conftest import ADMIN

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def test_profiler_routes_show_state_and_pairs(make_api) -> None:
    api = make_api(time_slo_ms=2000.0)
    headers = api.enroll("Galaxy S7")
    n = api.coordinator.run.manifest.num_params
    for _ in range(3):
        task = api.task(headers).json()
        assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
    overview = api.http.get("/v1/admin/profiler", headers=ADMIN_HEADERS)
    assert overview.status_code == 200
    body = overview.json()
    assert body["profiler"]["time_slo_ms"] == 2000.0
    (row,) = body["device_models"]
    assert row["device_model"] == "Galaxy S7" and row["measurements"] == 3 and row["time_updates"] == 3
    detail = api.http.get("/v1/admin/profiler/Galaxy S7", params={"limit": 2}, headers=ADMIN_HEADERS).json()
    assert detail["source"] == "personal" and detail["state"]["time"]["n_updates"] == 3
    assert len(detail["pairs"]) == 2 and detail["pairs"][-1]["time_ms"] == 50.0
    assert detail["pairs"][0]["at"] <= detail["pairs"][1]["at"]
    assert detail["pairs"][-1]["time_error_of_slo"] == (50.0 - 2000.0) / 2000.0
    assert api.http.get("/v1/admin/profiler/Nokia 3310", headers=ADMIN_HEADERS).status_code == 404
    assert api.http.get("/v1/admin/profiler").status_code == 401
    assert api.http.get("/v1/admin/profiler", headers=headers).status_code == 403


def test_maui_baseline_setting_alternates_requests(make_api, tmp_path) -> None:
    api = make_api(profiler_baseline="maui", profiler_params={"relative_memory": True})
    profiler = api.coordinator.profiler
    assert isinstance(profiler, RoundRobinDispatcher) and profiler.primary.relative_memory is True
    headers = api.enroll("Pixel 3")
    n = api.coordinator.run.manifest.num_params
    for _ in range(2):
        task = api.task(headers).json()
        assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
    assert profiler.requests == {"Pixel 3": 2} and profiler.profilers[1].n_observed_ == 2


def test_cli_profiler_bootstrap_writes_the_cold_start_dataset(tmp_path) -> None:
    out = tmp_path / "boot.csv"
    result = CliRunner().invoke(app, ["profiler", "bootstrap", "--out", str(out), "--runs", "1"])
    assert result.exit_code == 0, result.output
    from profiler import IProf

    profiler = IProf(time_slo_ms=3000.0).load_bootstrap(out)
    assert profiler.time_.boot_y_.size > 100


def test_profile_survives_a_restart(make_api) -> None:
    api = make_api(profiler_params={"personal_init": "level", "relative_memory": True})
    headers = api.enroll("Moto G5")
    n = api.coordinator.run.manifest.num_params
    for _ in range(2):
        task = api.task(headers).json()
        assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
    before = api.http.get("/v1/admin/profiler/Moto G5", headers=ADMIN_HEADERS).json()
    api.http.__exit__(None, None, None)
    again = make_api(profiler_params={"personal_init": "level", "relative_memory": True})
    after = again.http.get("/v1/admin/profiler/Moto G5", headers=ADMIN_HEADERS).json()
    assert after["state"] == before["state"] and after["pairs"] == before["pairs"]
