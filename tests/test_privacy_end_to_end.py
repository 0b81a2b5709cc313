"""DP end to end over real HTTP: a coordinator process with DP on, a worker computing clipped and
noised gradients with the served dp graph, its ε visible to it and enforced by the budget; a worker
that skipped clipping is refused."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from client import Rejected, Worker, WorkerConfig
from sim.data import write_shards
from tests.processes import ENROLL, ServerProcess

pytestmark = pytest.mark.slow


def test_a_dp_device_trains_until_its_budget_is_spent(tmp_path, database_url):
    shards, test_path = write_shards(tmp_path / "data", devices=2, partition="iid", seed=5)
    server = ServerProcess(
        tmp_path / "server",
        database_url=database_url,
        initial_model="mlp",
        k=1,  # each push applied (the default buffers 5)
        dp="true",
        dp_noise_multiplier=2.0,
        # σ 2, q = 32/N (N = 2000, or 1920 bucketed), δ = 1e-8: ε 0.15 after one task, 0.28 after ten
        dp_epsilon_budget=0.26,
        min_batch=32,
        max_batch=32,
        eval_data=test_path,
    ).start()
    try:
        config = WorkerConfig(
            base_url=server.url, enrollment_key=ENROLL, data=shards[0], seed=1, max_retry_after=1.0
        )
        reports = []
        with Worker(config, on_report=reports.append) as worker:
            with pytest.raises(Rejected) as refused:
                for _ in range(60):
                    reports.append(worker.run_one())
            assert refused.value.reason == "privacy_budget_exhausted", refused.value
            token = worker.api.token
        assert len(reports) >= 3 and all(r.applied for r in reports)
        assert all(np.isfinite(r.loss) for r in reports)
        mine = httpx.get(f"{server.url}/v1/privacy/me", headers={"Authorization": f"Bearer {token}"}).json()
        assert mine["tasks"] == len(reports) and mine["exhausted"] and 0.15 < mine["epsilon"] <= 0.26
        overview = server.admin("/v1/admin/privacy").json()
        assert overview["epsilon_max"] == pytest.approx(mine["epsilon"]) and overview["exhausted"] == 1
        assert "fleet_privacy_devices_exhausted 1.0" in httpx.get(f"{server.url}/metrics").text
        # a device that skips clipping and noise is refused: its gradient norm is impossible
        cheat = Worker(WorkerConfig(base_url=server.url, enrollment_key=ENROLL, data=shards[1], seed=2))
        with cheat:
            cheat.enroll()
            grant = cheat._request_task()
            n = cheat._model(grant)[0].num_params
            meta = {"label_counts": None, "loss": None, "compute_time_ms": 5.0}  # a DP push's meta
            with pytest.raises(Exception, match="exceeds the bound"):
                cheat.api.push_result(
                    grant.task_id, {**meta, "batch_size": grant.batch_size}, np.full(n, 1.0, np.float32)
                )
            # nor one that skips the noise (finding 15): the noise alone has a norm far above zero
            grant = cheat._request_task()
            with pytest.raises(Exception, match="least the DP noise alone gives"):
                cheat.api.push_result(
                    grant.task_id, {**meta, "batch_size": grant.batch_size}, np.zeros(n, np.float32)
                )
    finally:
        server.stop()
