"""Van Dijk et al. end to end through the API in process (issue 16): a coordinator app running
FLEET_STRATEGY=vandijk with DP on and the logreg built-in, a worker running the local SGD round on the
served dp graph; the grants carry the growing round sizes and steps, each round is charged at its own q_i =
s_i/N, and the model moves."""

from __future__ import annotations

import numpy as np
import pytest

from fleet_protocol.accounting import PrivacyEvent
from sim.data import write_shards
from tests.support.inprocess import InProcessServer
from tests.test_privacy_ledger import reference_epsilon


def test_vandijk_rounds_grow_and_each_is_charged_at_its_own_rate(tmp_path, database_url):
    shards, test_path = write_shards(tmp_path / "data", devices=2, partition="iid", seed=5)
    server = InProcessServer(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        strategy="vandijk",
        dp="true",
        dp_epsilon_budget=100.0,
        vandijk_a=5.0,
        vandijk_b=5,
        vandijk_noise_multiplier=2.0,
        vandijk_clip=0.5,
        learning_rate=0.01,
        eval_data=test_path,
    ).start()
    try:
        grants = []
        watch = lambda e: grants.append(e.grant) if e.kind == "task" else None  # noqa: E731
        with server.worker(shards[0], seed=1, on_event=watch) as worker:
            reports = [worker.run_one() for _ in range(3)]
            token = worker.api.token
        assert all(r.applied for r in reports) and [r.batch_size for r in reports] == [5, 10, 15]
        terms = [g.dp for g in grants]
        assert [t["mechanism"] for t in terms] == ["local-sgd-round/1"] * 3
        assert [t["round"] for t in terms] == [0, 1, 2] and [t["clip"] for t in terms] == [0.5] * 3
        n = round(5 / terms[0]["sampling_rate"])
        assert [t["sampling_rate"] for t in terms] == pytest.approx([5 / n, 10 / n, 15 / n])
        steps = [0.01 / (1 + 0.01 * t**0.5) for t in (0, 5, 15)]  # η̄_i at t_i = Σ_{j<i} s_j
        assert [t["step_size"] for t in terms] == pytest.approx(steps)
        expected = reference_epsilon([PrivacyEvent(2.0, s / n) for s in (5, 10, 15)], terms[0]["delta"])
        mine = server.get("/v1/privacy/me", headers={"Authorization": f"Bearer {token}"}).json()
        assert mine["tasks"] == 3 and mine["epsilon"] == pytest.approx(expected, rel=1e-6)
        assert server.get("/v1/models/active").json()["current_version"] == 3
        base = f"/v1/models/{grants[0].model_id}/versions"
        first, last = (np.frombuffer(server.get(f"{base}/{v}/params").content, "<f4") for v in (0, 3))
        assert np.isfinite(last).all() and not np.array_equal(first, last)
    finally:
        server.stop()
