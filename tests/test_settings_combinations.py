"""Issue 29, settings that cannot break the fleet: every strategy × DP × role is either refused clearly
(at start-up and in the console's form, nothing changed) or runs on a real device; every limit is finite
and bounded; the push norm check cannot be switched off."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from client import DeviceData, StaticFeatures
from client._energy import EnergyModel
from server.settings import Settings, with_overrides
from server.settings_rules import startup_problem
from server.strategies import STRATEGIES
from tests.conftest import FEATURES, settings_for
from tests.test_console import PASSWORD, USER, csrf, login

warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
from starlette.testclient import TestClient  # noqa: E402

ROLES = ("all", "api", "aggregator")
POSTGRES = "postgresql://fleet@127.0.0.1/fleet"  # never connected to: validation only reads the scheme


def _data(n: int = 240, seed: int = 0) -> DeviceData:
    rng = np.random.default_rng(seed)
    return DeviceData(rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, n))


def _console(tmp_path: Path, **settings: Any) -> TestClient:
    from server.api.app import create_app

    values = {
        "database_url": f"sqlite:///{tmp_path / 'fleet.db'}",
        "console_user": USER,
        "console_password": PASSWORD,
        "initial_model": "logreg",
        "max_batch": 40,  # q = B/N stays under the device's own cap with DP
        **settings,
    }
    client = TestClient(create_app(settings_for(tmp_path, **values)))
    client.__enter__()
    login(client)
    return client


def _run_one_task(client: TestClient, state_dir: Path) -> Any:
    """A real device worker (a new install) asking this app for one task: its run's summary."""
    from client import Worker, WorkerConfig
    from tests.conftest import ENROLL

    config = WorkerConfig(
        base_url=str(client.base_url), enrollment_key=ENROLL, data=_data(), max_tasks=1, max_seconds=30,
        state_dir=state_dir, seed=0, max_consecutive_errors=3,
    )  # fmt: skip
    features = StaticFeatures({k: v for k, v in FEATURES.items() if v is not None})
    worker = Worker(config, client=client, features=features, energy=EnergyModel(), sleep=lambda _: None)
    return worker.run()


def _startup(strategy: str, dp: bool, role: str) -> str | None:
    """``fleet serve``'s check on these settings (None: they start)."""
    database = POSTGRES if role != "all" else ""
    values = {"strategy": strategy, "dp": dp, "role": role, "database_url": database}
    return startup_problem(lambda: Settings(data_dir=Path("var-unused"), _env_file=None, **values))


def test_every_strategy_dp_and_role_is_refused_clearly_or_runs_on_a_device(tmp_path):
    outcomes: dict[tuple[str, bool, str], str] = {}
    stopped: list[tuple[str, bool, str, Any]] = []
    for dp in (False, True):
        client = _console(tmp_path / f"dp-{dp}", dp=dp)
        try:
            coordinator = client.app.state.coordinator
            for name in sorted(STRATEGIES):
                problems = {role: _startup(name, dp, role) for role in ROLES}
                for role, problem in problems.items():
                    if problem is not None:  # a clear refusal names the setting and what it requires
                        assert re.search(r"FLEET_(STRATEGY|DP|ROLE)", problem), problem
                        assert "requires" in problem or "DP is on, but" in problem, problem
                    # the console's form validates through with_overrides, on a process of this role too
                    # (one that cannot start, DP in a scale-out role, has no form: refused at start-up)
                    url = POSTGRES if role != "all" else ""
                    try:
                        running = Settings(_env_file=None, dp=dp, role=role, database_url=url)
                        with_overrides(running, {"strategy": name})
                        form_ok = True
                    except ValidationError:
                        form_ok = False
                    assert form_ok == (problem is None), (name, dp, role, problem)
                    outcomes[(name, dp, role)] = "refused" if problem else "accepted"

                before = (coordinator.run.strategy.describe(), client.app.state.admin_store.overrides())
                answer = client.post("/admin/settings", data={"csrf_token": csrf(client), "strategy": name})
                if problems["all"] is not None:
                    assert answer.status_code == 422 and "Nothing was changed" in answer.text, name
                    assert "requires FLEET_DP=true" in answer.text or "DP is on, but" in answer.text
                    after = (coordinator.run.strategy.describe(), client.app.state.admin_store.overrides())
                    assert after == before and client.app.state.settings.strategy.name != name
                    continue
                assert answer.status_code == 200 and "saved" in answer.text, (name, answer.text[-500:])
                assert coordinator.run.strategy.name == name and client.app.state.settings.dp is dp
                summary = _run_one_task(client, tmp_path / f"device-{name}-{dp}")
                if summary.tasks != 1:  # an accepted combination a device cannot run: what the issue measured
                    stopped.append((name, dp, "all", summary))
        finally:
            client.__exit__(None, None, None)
    assert stopped == []
    # the api and aggregator roles grant the same terms as the single process (a role changes where pushes
    # go, not the strategy's terms) and refuse DP: an accepted one is a combination run above
    for (name, dp, role), outcome in outcomes.items():
        if role != "all" and outcome == "accepted":
            assert not dp and outcomes[(name, dp, "all")] == "accepted"
    assert outcomes[("audp", False, "all")] == outcomes[("mapa", False, "all")] == "refused"
    assert outcomes[("audp", True, "all")] == "accepted" and outcomes[("fedbuff", True, "api")] == "refused"


def test_fleet_serve_refuses_a_strategy_that_needs_dp_without_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from fleet.cli import app

    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setenv("FLEET_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FLEET_STRATEGY", "audp")
    monkeypatch.delenv("FLEET_DP", raising=False)
    result = CliRunner().invoke(app, ["serve", "--port", "1"])
    assert result.exit_code == 2
    assert "FLEET_STRATEGY=audp requires FLEET_DP=true" in result.output


@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "-inf", "1e7"])
def test_limits_are_finite_and_bounded_at_startup_and_in_the_form(tmp_path, value):
    for name in ("max_gradient_norm", "lease_seconds", "rate_limit_per_second", "time_slo_ms"):
        with pytest.raises(ValidationError):
            Settings(data_dir=tmp_path, _env_file=None, **{name: value})
    problem = startup_problem(lambda: Settings(data_dir=tmp_path, _env_file=None, max_gradient_norm=value))
    assert problem is not None and problem.startswith("FLEET_MAX_GRADIENT_NORM: ")
    for strategy in ({"name": "fedbuff", "learning_rate": value}, {"name": "adasgd", "time_window": value}):
        with pytest.raises(ValidationError):
            Settings(data_dir=tmp_path, _env_file=None, strategy=strategy)

    client = _console(tmp_path)
    try:
        coordinator = client.app.state.coordinator
        answer = client.post("/admin/settings", data={"csrf_token": csrf(client), "max_gradient_norm": value})
        assert answer.status_code == 422 and "Nothing was changed" in answer.text
        assert coordinator.max_gradient_norm == 1e4 and client.app.state.settings.max_gradient_norm == 1e4
        assert client.app.state.admin_store.overrides() == {}
    finally:
        client.__exit__(None, None, None)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # 1e30² in float32: refused as inf
def test_the_push_norm_check_cannot_be_switched_off(make_api):
    from server.core.coordinator import Coordinator
    from tests.memory_store import MemoryStore

    with pytest.raises(ValueError, match="finite"):
        Coordinator(store=MemoryStore(), profiler=None, strategy_factory=None, max_gradient_norm=math.inf)
    api = make_api(max_gradient_norm=1e6)  # the largest the settings allow
    with pytest.raises(ValueError, match="finite"):
        api.coordinator.reconfigure(max_gradient_norm=math.inf)
    headers = api.enroll()
    grant = api.task(headers).json()
    num_params = api.coordinator.run.manifest.num_params
    pushed = api.push(headers, grant["task_id"], np.full(num_params, 1e30, np.float32))
    assert pushed.status_code == 422 and "norm" in pushed.text
    assert api.coordinator.run.version == 0
