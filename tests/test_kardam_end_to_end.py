"""Kardam end to end through the API in process (issue 17): a coordinator app with FLEET_KARDAM=true around
dynsgd, four honest workers and one running the sign-flip attack; after a warm-up the attacker's pushes
get weight 0, the honest ones are applied, and the counters reach the admin stats."""

from __future__ import annotations

from sim.data import write_shards
from tests.support.inprocess import InProcessServer


def test_a_sign_flipping_worker_is_filtered_out(tmp_path, database_url):
    shards, test_path = write_shards(tmp_path / "data", devices=5, partition="iid", seed=7)
    server = InProcessServer(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        strategy="dynsgd",
        k=1,
        kardam="true",
        kardam_f=1,
        eval_data=test_path,
    ).start()
    try:
        workers = [
            server.worker(shard, seed=i, attack="sign-flip" if i == 0 else None)
            for i, shard in enumerate(shards)
        ]
        weights: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(12):
            for i, worker in enumerate(workers):
                weights[i == 0].append(worker.run_one().weight)
        for worker in workers:
            worker.close()
        attacker, honest = weights[True][4:], weights[False][16:]
        assert all(w == 0 for w in attacker), weights[True]
        assert sum(w == 0 for w in honest) <= len(honest) // 4, weights[False]
        stats = str(server.admin("/v1/admin/stats").json())
        assert "kardam_dropped_lipschitz" in stats
    finally:
        server.stop()
