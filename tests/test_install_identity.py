"""Re-enrolling the same install keeps its device id (issue 27, finding 4): in the core on each store, through
the API, and with a worker in process whose own ledger refuses beyond its budget whatever the server says.
Over real HTTP: tests/test_reenroll_end_to_end.py."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from client import DeviceData, DeviceLedger, DevicePrivacy, PrivacyRefused
from server.core.coordinator import Coordinator
from server.core.errors import Forbidden
from server.strategies import make_strategy
from sim.data import load_mnist
from sim.harness import BatchSizer
from tests.conftest import ENROLL
from tests.support.inprocess import InProcessServer
from tests.support.stores import BACKENDS, started_cores, store_factory

DP = {"dp": "true", "dp_noise_multiplier": 2.0, "min_batch": 32, "max_batch": 32, "initial_model": "logreg"}


@pytest.fixture(params=BACKENDS)
def make_core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Coordinator]]:
    """Factory of coordinators on one storage: calling it again is a restart."""
    options = {
        "profiler": BatchSizer(mean=10),
        "strategy_factory": lambda: make_strategy("fedavg-async", k=1),
    }
    with store_factory(request.param, tmp_path) as make_store, started_cores(make_store) as make:
        yield lambda: make(**options)


def test_the_same_install_gets_its_device_id_back_with_a_new_token(make_core):
    core, secret = make_core(), secrets.token_urlsafe(32)
    device, token = core.enroll("Pixel", secret)
    again, fresh = core.enroll("Pixel", secret)
    assert again.device_id == device.device_id and fresh != token
    assert core.devices.authenticate(token) is None  # the old token is revoked
    assert core.devices.authenticate(fresh) == again
    assert core.store.count_devices() == 1
    restarted = make_core()
    assert restarted.devices.authenticate(token) is None and restarted.devices.authenticate(fresh) == again
    third, _ = restarted.enroll("Pixel", secret)
    assert third.device_id == device.device_id
    others = {restarted.enroll("Pixel")[0].device_id for _ in range(2)}  # no secret: new devices
    others.add(restarted.enroll("Pixel", secrets.token_urlsafe(32))[0].device_id)
    assert len(others) == 3 and device.device_id not in others


def test_a_revoked_install_cannot_enroll_again(make_core):
    core, secret = make_core(), secrets.token_urlsafe(32)
    device, _ = core.enroll("Pixel", secret)
    core.revoke_device(device.device_id, actor="alice")
    with pytest.raises(Forbidden, match="revoked"):
        core.enroll("Pixel", secret)


def test_enrollment_over_the_api_keeps_the_id_of_an_install(make_api):
    api, secret = make_api(), secrets.token_urlsafe(32)

    def enroll(**extra: str) -> object:
        return api.http.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "X", **extra})

    first, second = enroll(install_secret=secret).json(), enroll(install_secret=secret).json()
    assert first["device_id"] == second["device_id"] and first["token"] != second["token"]
    old = {"Authorization": f"Bearer {first['token']}"}
    assert api.http.get("/v1/privacy/me", headers=old).status_code == 401
    assert enroll().json()["device_id"] != first["device_id"]
    for bad in ("short", "x" * 200, "not/url+safe" * 3):
        assert enroll(install_secret=bad).status_code == 422
    api.coordinator.revoke_device(first["device_id"], actor="alice")
    refused = enroll(install_secret=secret)
    assert refused.status_code == 403 and "revoked" in refused.json()["detail"]


@pytest.fixture(scope="module")
def phone() -> DeviceData:
    """A phone's 200 digits: q = 32/200 at the batch of 32."""
    train, _ = load_mnist(seed=5)
    return DeviceData(train.x[:200], train.y[:200])


@pytest.fixture
def serve(tmp_path: Path, database_url: str) -> Iterator[Callable[..., InProcessServer]]:
    """``serve(**settings)``: a coordinator app in this process (stopped at teardown)."""
    servers: list[InProcessServer] = []

    def make(**settings: object) -> InProcessServer:
        servers.append(InProcessServer(tmp_path / "server", database_url=database_url, **settings).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


def test_the_device_ledger_refuses_beyond_its_budget_against_a_bigger_server_budget(tmp_path, serve, phone):
    """The server would allow ε 100; the device's own budget of 1.6 stops it, and a restarted worker on the
    same state asks for nothing, enrolled again as the same device."""
    server, state = serve(dp_epsilon_budget=100.0, **DP), tmp_path / "state"
    events: list[str] = []
    watch = lambda e: events.append(e.kind)  # noqa: E731
    privacy = DevicePrivacy(budget=1.6)
    with server.worker(phone, seed=1, state_dir=state, privacy=privacy, on_event=watch) as worker:
        summary = worker.run()
        first = worker.device_id
    assert summary.stop_reason == "privacy_budget_exhausted" and not summary.finished
    assert summary.tasks >= 1 and summary.rejections["privacy_budget_exhausted"] == 1
    ledger = DeviceLedger.open(state)
    assert ledger.tasks == summary.tasks and ledger.epsilon() <= 1.6 and ledger.exhausted
    version = server.get("/v1/models/active").json()["current_version"]
    assert version == summary.tasks  # the refused task was never pushed
    with server.worker(phone, seed=2, state_dir=state, on_event=watch) as again:
        resumed = again.run()
        assert again.enroll() == first  # the same install: the same device id
    assert resumed.stop_reason == "privacy_budget_exhausted" and resumed.tasks == 0
    assert server.get("/v1/models/active").json()["current_version"] == version
    assert events.count("privacy") == 2


def test_a_charge_is_on_disk_before_the_step_is_computed(tmp_path, serve, phone, monkeypatch):
    def crash(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the process died while computing")

    monkeypatch.setattr("client._worker.private_step", crash)
    server = serve(dp_epsilon_budget=100.0, **DP)
    with server.worker(phone, seed=1, state_dir=tmp_path / "state") as worker, pytest.raises(RuntimeError):
        worker.run_one()
    assert DeviceLedger.open(tmp_path / "state").tasks == 1
    assert server.get("/v1/models/active").json()["current_version"] == 0


def test_terms_below_the_floor_are_declined_and_nothing_is_pushed(serve, phone):
    server = serve(**{**DP, "dp_noise_multiplier": 0.3, "dp_epsilon_budget": 1e6})
    with server.worker(phone, seed=1, max_seconds=1.0, backoff_initial=0.01, backoff_max=0.05) as worker:
        summary = worker.run()
    assert summary.tasks == 0 and summary.rejections["privacy_terms_refused"] >= 1
    assert summary.stop_reason == "max_seconds" and worker.ledger.tasks == 0
    assert server.get("/v1/models/active").json()["current_version"] == 0


def test_a_refused_token_re_enrolls_as_the_same_device(tmp_path, serve, phone):
    server = serve(initial_model="logreg")
    with server.worker(phone, seed=1, state_dir=tmp_path / "state", max_tasks=1) as worker:
        first = worker.enroll()
        worker.api.token = "revoked-or-lost"
        summary = worker.run()
        assert summary.tasks == 1 and worker.device_id == first


def test_privacy_refused_is_a_worker_error_with_a_reason():
    refused = PrivacyRefused("no", reason="privacy_budget_exhausted", stop=True)
    assert refused.stop and refused.detail == "no" and "stop=True" in repr(refused)
    assert np.isfinite(DeviceLedger.open(None).epsilon())


def test_the_app_says_why_the_device_refused(tmp_path):
    from client._loop import WorkerEvent
    from client.app.controller import AppController

    control = AppController(tmp_path / "app")
    try:
        control._on_event(WorkerEvent("privacy", "σ below this device's floor", retry_at=1e12))
        assert (control.status().state, control.status().message) == (
            "waiting",
            "σ below this device's floor",
        )
        control._on_event(WorkerEvent("privacy", "this device's own privacy budget is spent"))
        assert control.status().state == "finished" and "budget is spent" in control.status().message
    finally:
        control.close()
