"""MAPA end to end through the API in process (issue 16): a coordinator app running FLEET_STRATEGY=mapa with
DP on and the logreg built-in, a worker running the norm-Laplace mechanism on the served dp graph; the
grants carry the stage's ΔS (halved at each stage), every step is charged its pure ε, and the model moves."""

from __future__ import annotations

import numpy as np
import pytest

from sim.data import write_shards
from tests.support.inprocess import InProcessServer


def test_mapa_grants_carry_the_stage_sensitivity_and_steps_are_charged(tmp_path, database_url):
    shards, test_path = write_shards(tmp_path / "data", devices=2, partition="iid", seed=5)
    server = InProcessServer(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        strategy="mapa",
        dp="true",
        dp_epsilon_budget=100.0,
        dp_step_epsilon=0.5,
        dp_noise_sampler="exact",
        mapa_sensitivity=8.0,
        mapa_loss_gap=1e-12,  # T_s clamps at 1: every update ends a stage, so ΔS halves per task
        tau_max=0,
        eval_data=test_path,
    ).start()
    try:
        grants = []
        watch = lambda e: grants.append(e.grant) if e.kind == "task" else None  # noqa: E731
        with server.worker(shards[0], seed=1, on_event=watch) as worker:
            reports = [worker.run_one() for _ in range(4)]
            token = worker.api.token
        assert all(r.applied for r in reports) and [r.batch_size for r in reports] == [12] * 4
        terms = [g.dp for g in grants]
        assert [t["mechanism"] for t in terms] == ["clip-normlaplace/1"] * 4
        assert [t["sensitivity"] for t in terms] == pytest.approx([8.0, 4.0, 2.0, 1.0])
        assert [t["clip"] for t in terms] == pytest.approx([48.0, 24.0, 12.0, 6.0])  # G = bΔS/2
        assert [t["epsilon_after"] for t in terms] == pytest.approx([0.5, 1.0, 1.5, 2.0])
        mine = server.get("/v1/privacy/me", headers={"Authorization": f"Bearer {token}"}).json()
        assert mine["tasks"] == 4 and mine["epsilon"] == pytest.approx(2.0)
        assert "mapa" in str(server.admin("/v1/admin/stats").json())
        assert server.get("/v1/models/active").json()["current_version"] == 4
        base = f"/v1/models/{grants[0].model_id}/versions"
        first, last = (np.frombuffer(server.get(f"{base}/{v}/params").content, "<f4") for v in (0, 4))
        assert np.isfinite(last).all() and not np.array_equal(first, last)
    finally:
        server.stop()


def test_audp_grants_a_fixed_clip_and_charges_each_step(tmp_path, database_url):
    """AUDP through the same path: the clip G and ΔS = 2G/b stay fixed, each step costs its pure ε."""
    shards, test_path = write_shards(tmp_path / "data", devices=2, partition="iid", seed=6)
    server = InProcessServer(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        strategy="audp",
        dp="true",
        dp_epsilon_budget=1.0,
        dp_step_epsilon=0.4,
        dp_noise_sampler="exact",
        audp_clip=3.0,
        tau_max=0,
        eval_data=test_path,
    ).start()
    try:
        grants = []
        watch = lambda e: grants.append(e.grant) if e.kind == "task" else None  # noqa: E731
        with server.worker(shards[0], seed=2, on_event=watch) as worker:
            reports = [worker.run_one() for _ in range(2)]
            with pytest.raises(Exception, match="budget"):
                worker.run_one()  # 0.4 + 0.4 spent; a third step would pass the budget of 1.0
        assert all(r.applied for r in reports)
        terms = [g.dp for g in grants]
        assert [t["mechanism"] for t in terms] == ["clip-normlaplace/1"] * 2
        assert [t["clip"] for t in terms] == pytest.approx([3.0, 3.0])
        assert [t["sensitivity"] for t in terms] == pytest.approx([2 * 3.0 / reports[0].batch_size] * 2)
        assert [t["epsilon_after"] for t in terms] == pytest.approx([0.4, 0.8])
        assert "audp" in str(server.admin("/v1/admin/stats").json())
    finally:
        server.stop()
