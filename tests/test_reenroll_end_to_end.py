"""Re-enrollment does not reset ε, end to end over real HTTP (issue 27, finding 4: three enrollments on the
same data used to reach ε 14.8 against a budget of 8). A DP worker with a state directory trains against a
coordinator process until the coordinator refuses for the budget; a second worker on the same data and
state enrolls again, gets the same device id, and the coordinator's ε goes on from where it was."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from client import DeviceLedger, Rejected, Worker, WorkerConfig
from sim.data import load_mnist
from tests.processes import ENROLL, ServerProcess

pytestmark = pytest.mark.slow


def test_enrolling_again_on_the_same_data_continues_the_coordinators_ledger(tmp_path, database_url):
    train, _ = load_mnist(seed=5)
    shard = tmp_path / "phone.npz"
    np.savez(shard, x=train.x[:200], y=train.y[:200])  # q = 32/200: a few tasks spend ε 2
    server = ServerProcess(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        dp="true",
        dp_noise_multiplier=2.0,
        dp_epsilon_budget=2.0,
        min_batch=32,
        max_batch=32,
    ).start()
    state = tmp_path / "phone.npz.fleet-state"

    def me(token: str) -> httpx.Response:
        return httpx.get(f"{server.url}/v1/privacy/me", headers={"Authorization": f"Bearer {token}"})

    try:
        config = WorkerConfig(base_url=server.url, enrollment_key=ENROLL, data=shard, seed=1, state_dir=state)
        with Worker(config) as first, pytest.raises(Rejected) as refused:
            for _ in range(30):
                first.run_one()
        assert refused.value.reason == "privacy_budget_exhausted", refused.value
        spent = me(first.api.token).json()
        assert spent["exhausted"] and 2 <= spent["tasks"] < 30 and spent["epsilon"] <= 2.0
        assert DeviceLedger.open(state).tasks == spent["tasks"]  # the device charged every task it ran

        again = Worker(
            WorkerConfig(base_url=server.url, enrollment_key=ENROLL, data=shard, seed=2, state_dir=state)
        )
        with again:
            assert again.enroll() == first.device_id  # the same install: the same device
            assert me(first.api.token).status_code == 401  # its old token is revoked
            resumed = me(again.api.token).json()
            assert resumed["tasks"] == spent["tasks"] and resumed["epsilon"] == pytest.approx(
                spent["epsilon"]
            )
            with pytest.raises(Rejected) as still:
                again.run_one()  # the coordinator's ledger goes on: no fresh budget for a new enrollment
            assert still.value.reason == "privacy_budget_exhausted"
        overview = server.admin("/v1/admin/privacy").json()
        assert len(overview["devices"]) == 1 and overview["exhausted"] == 1
        assert overview["epsilon_max"] <= 2.0
        assert DeviceLedger.open(state).tasks == spent["tasks"]  # refused by the server: nothing charged
    finally:
        server.stop()
