"""The same storage contract on SQLite and PostgreSQL: everything acknowledged is found again."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from server.compose import build_coordinator
from server.core.errors import StorageUnavailable
from server.core.types import TaskGrant, TaskRequest, TaskResult
from tests.conftest import FEATURES, settings_for


def result(n: int, value: float, counts: list[int]) -> TaskResult:
    gradient = np.full(n, value, np.float32)
    return TaskResult(
        label_counts=np.array(counts),
        loss=1.5,
        compute_time_ms=120.0,
        energy=0.002,
        batch_size=int(sum(counts)),
        gradient=gradient,
        digest=hashlib.sha256(gradient.tobytes() + str(counts).encode()).hexdigest(),
    )


def test_restart_finds_every_acknowledged_thing(tmp_path, storage_url):
    # AdaSGD: the strategy with the most state to restore (staleness history, label counts)
    settings = settings_for(tmp_path, storage_url=storage_url, strategy="adasgd", k=2, version_retention=3)
    first = build_coordinator(settings)
    n = first.run.manifest.num_params
    devices = [first.enroll(model) for model in ("Galaxy S6", "Galaxy S10")]
    outcomes = []
    for step in range(7):  # 7 pushes with K = 2: 3 updates and one gradient left in the buffer
        device, _ = devices[step % 2]
        grant = first.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
        assert isinstance(grant, TaskGrant)
        counts = [0] * 10
        counts[step % 10] = 10
        outcomes.append((device, grant.task_id, result(n, 0.001 * (step + 1), counts)))
        first.submit(device, grant.task_id, outcomes[-1][2])
    first.record_evaluation(first.run.model_id, first.run.version, 0.42, 1.7)
    first.pause()
    before = first.run
    profile = {m: first.profiler.device_state(m) for m in ("Galaxy S6", "Galaxy S10")}
    strategy_state = before.strategy.state_dict()

    second = build_coordinator(settings)
    after = second.run
    assert (after.model_id, after.version, after.status) == (before.model_id, 3, "paused")
    np.testing.assert_array_equal(after.params, before.params)
    restored = after.strategy.state_dict()
    assert restored["staleness_seen"] == strategy_state["staleness_seen"]
    np.testing.assert_array_equal(restored["label_totals"], strategy_state["label_totals"])
    assert [b.task_id for b in after.strategy.buffer] == [b.task_id for b in before.strategy.buffer]
    np.testing.assert_array_equal(after.strategy.buffer[0].gradient, before.strategy.buffer[0].gradient)
    for model, state in profile.items():
        assert second.profiler.device_state(model) == state
    for device, token in devices:
        assert second.devices.authenticate(token) == device
    assert second.evaluations(after.model_id)[-1]["accuracy"] == 0.42
    # a retried push of an acknowledged task gets its original answer; versions past retention are gone
    device, task_id, body = outcomes[0]
    assert second.submit(device, task_id, body).duplicate
    assert [r.version for r in second.catalog.versions(after.model_id)] == [0, 1, 2, 3]
    np.testing.assert_array_equal(second.catalog.params(after.model_id, 3), before.params)


def test_failed_commit_fails_the_push_and_reloads_the_durable_state(tmp_path, storage_url, monkeypatch):
    coordinator = build_coordinator(settings_for(tmp_path, storage_url=storage_url))
    device, _ = coordinator.enroll("Pixel")
    grant = coordinator.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
    coordinator.journal.flush()  # the grant is stored; the push's batch is the one that fails
    before = (coordinator.run.version, coordinator.run.params.copy(), coordinator.run.strategy.state_dict())

    from server.store import sql

    def broken(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sql, "write_events", broken)
    n = coordinator.run.manifest.num_params
    with pytest.raises(StorageUnavailable, match="disk full"):
        coordinator.submit(device, grant.task_id, result(n, 0.01, [1] * 10))
    assert coordinator.run.version == before[0]
    np.testing.assert_array_equal(coordinator.run.params, before[1])
    assert before[2]["warmup_seen"] == 0  # the default strategy's state (clip norms, warm-up) rolled back
    assert coordinator.run.strategy.state_dict() == before[2]
    monkeypatch.undo()
    outcome = coordinator.submit(device, grant.task_id, result(n, 0.01, [1] * 10))
    assert outcome.version == before[0] + 1 and not outcome.duplicate
    coordinator.close()


def test_concurrent_pushes_share_commits_and_all_survive(tmp_path, storage_url):
    """Group commit: pushes from many threads are acknowledged only once stored, and all are stored."""
    import threading

    settings = settings_for(tmp_path, storage_url=storage_url)
    coordinator = build_coordinator(settings)
    n = coordinator.run.manifest.num_params
    devices = [coordinator.enroll(f"Phone {i}")[0] for i in range(8)]
    acknowledged: list[str] = []

    def device_loop(device) -> None:
        for step in range(10):
            grant = coordinator.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
            counts = [0] * 10
            counts[step % 10] = 10
            coordinator.submit(device, grant.task_id, result(n, 1e-4, counts))
            acknowledged.append(grant.task_id)

    threads = [threading.Thread(target=device_loop, args=(d,)) for d in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    restarted = build_coordinator(settings)  # no flush, no close: only what was committed counts
    assert restarted.run.version == 80
    for task_id in acknowledged:
        assert restarted.store.lease(task_id).status == "applied"
    np.testing.assert_array_equal(restarted.run.params, coordinator.run.params)
    coordinator.close()
