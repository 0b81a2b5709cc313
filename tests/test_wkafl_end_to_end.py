"""WKAFL end to end through the API in process (issue 17): a coordinator app with FLEET_STRATEGY=wkafl and K
= 3, three workers on Alg. 4 shards (wkafl-L2); the model steps once per 3 pushes, each push is weighed
(e/2)^−τ, the stage switch survives a restart (it comes back from the stored state), and the model moves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.data import write_shards
from tests.support.inprocess import InProcessServer


def test_wkafl_steps_once_per_k_pushes_and_keeps_its_stage_across_a_restart(tmp_path, database_url):
    shards, test_path = write_shards(tmp_path / "data", devices=3, partition="wkafl-L2", seed=3)
    server = InProcessServer(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        strategy="wkafl",
        k=3,
        learning_rate=0.05,
        wkafl_switch_update=1,  # the second step runs in stage 2
        wkafl_loss_threshold=0,
        eval_data=test_path,
    ).start()
    try:
        workers = [server.worker(s, seed=i) for i, s in enumerate(shards)]
        reports = [w.run_one() for _ in range(2) for w in workers]
        assert [r.applied for r in reports] == [False, False, True] * 2
        assert [r.current_version for r in reports] == [0, 0, 1, 1, 1, 2]
        assert all(r.weight == pytest.approx((math.e / 2) ** -r.staleness) for r in reports)
        strategy = server.admin("/v1/admin/stats").json()["strategy"]
        assert strategy["strategy"] == "wkafl" and strategy["stage"] == 2 and strategy["updates"] == 2
        for w in workers:
            w.close()
        server.stop()
        server.start()
        assert server.admin("/v1/admin/stats").json()["strategy"]["stage"] == 2  # restored from the state
        workers = [server.worker(s, seed=i) for i, s in enumerate(shards)]
        later = [w.run_one() for w in workers]
        for w in workers:
            w.close()
        assert [r.applied for r in later] == [False, False, True] and later[-1].current_version == 3
        base = f"/v1/models/{reports[0].model_id}/versions"
        first, last = (np.frombuffer(server.get(f"{base}/{v}/params").content, "<f4") for v in (0, 3))
        assert np.isfinite(last).all() and not np.array_equal(first, last)
    finally:
        server.stop()
