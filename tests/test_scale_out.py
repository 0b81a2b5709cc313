"""Scale-out (issue 18, docs/scale-out.md): API workers queue validated pushes in PostgreSQL, one
fenced aggregator applies them. In-process checks of the queue and the fence first, then the real
topology: processes, HTTP, a Redis of its own, and kill -9 of each kind of process under load."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from server.core.errors import Conflict, LeaseLost
from server.core.types import Device, TaskRequest, TaskResult
from tests.conftest import FEATURES, settings_for

pytestmark = pytest.mark.postgres
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")


@pytest.fixture
def postgres_database():
    from tests.conftest import fresh_postgres_database, postgres_url

    with fresh_postgres_database(postgres_url()) as url:
        yield url


def scalar(url: str, sql: str) -> object:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql)).scalar_one()
    finally:
        engine.dispose()


def count(url: str, sql: str) -> int:
    return int(scalar(url, sql))  # type: ignore[call-overload]


def result(n: int, value: float = 0.01) -> TaskResult:
    gradient = np.full(n, value, np.float32)
    return TaskResult(np.ones(10, np.int64), 2.0, 50.0, 0.001, 10, gradient, f"digest-{value}")


def cluster(tmp_path: Path, url: str):
    """One API worker core and the aggregator on one database, in this process (no Redis: the worker
    follows by reading storage)."""
    from server.compose import build_coordinator, build_store
    from server.scale.aggregator import AggregatorStore, take_lease

    aggregator_settings = settings_for(tmp_path, database_url=url, role="aggregator")
    store = build_store(aggregator_settings)
    token = take_lease(store, "test-aggregator", 30.0, threading.Event())
    fenced = AggregatorStore(store, holder="test-aggregator", token=token, ttl=30.0, announcer=None)
    aggregator = build_coordinator(aggregator_settings, store=fenced)
    worker = build_coordinator(settings_for(tmp_path, database_url=url, role="api"))
    return worker, aggregator, fenced


def test_a_push_is_queued_answered_the_same_on_replay_and_applied_once(tmp_path, postgres_database):
    from server.compose import build_coordinator
    from server.scale.aggregator import drain

    worker, aggregator, fenced = cluster(tmp_path, postgres_database)
    device, _ = worker.enroll("Galaxy S7")
    device = Device(device.device_id, device.device_model)
    grant = worker.request_task(TaskRequest(device, FEATURES, [5] * 10))
    n = worker.run.manifest.num_params
    first = worker.submit(device, grant.task_id, result(n))
    assert first.queued and not first.applied and first.weight == 0.0 and first.version == 0
    replay = worker.submit(device, grant.task_id, result(n))
    assert replay.duplicate and replay.queued and replay.version == first.version
    with pytest.raises(Conflict):
        worker.submit(device, grant.task_id, result(n, 0.02))
    assert count(postgres_database, "select count(*) from push_queue") == 1
    assert aggregator.run.version == 0

    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    assert drain(aggregator, fenced, batch=16, stop=stop) == 1
    assert aggregator.run.version == 1
    assert count(postgres_database, "select count(*) from push_queue") == 0
    assert count(postgres_database, "select current_version from models") == 1
    assert count(postgres_database, "select count(*) from tasks where status = 'applied'") == 1
    worker.follow()  # what an announcement triggers
    assert worker.run.version == 1
    assert np.allclose(worker.run.params, aggregator.run.params)
    # another worker (no memory of the task) answers a replay from storage, the same way
    other = build_coordinator(settings_for(tmp_path, database_url=postgres_database, role="api"))
    again = other.submit(device, grant.task_id, result(n))
    assert again.duplicate and again.version == 1 and again.applied  # the aggregator's answer by now
    for core in (worker, aggregator, other):
        core.close()


def test_an_aggregator_that_lost_its_lease_commits_nothing(tmp_path, postgres_database):
    from server.compose import build_store
    from server.scale.aggregator import AggregatorStore, apply_queued

    worker, aggregator, fenced = cluster(tmp_path, postgres_database)
    store = build_store(settings_for(tmp_path, database_url=postgres_database))
    assert store.take_aggregator_lease("second", now=time.time(), ttl=5.0) is None  # the first holds it
    token = store.take_aggregator_lease("second", now=time.time() + 60, ttl=5.0)  # once it has lapsed
    assert token == fenced.token + 1
    device, _ = worker.enroll("Galaxy S7")
    device = Device(device.device_id, device.device_model)
    grant = worker.request_task(TaskRequest(device, FEATURES, [5] * 10))
    worker.submit(device, grant.task_id, result(worker.run.manifest.num_params))
    pushes = fenced.queued(10)
    ticket = apply_queued(aggregator, pushes)
    with pytest.raises(Exception) as failure:
        ticket.wait(timeout=30)
    from server.scale.aggregator import lease_lost

    assert lease_lost(failure.value)
    assert count(postgres_database, "select count(*) from push_queue") == 1  # still queued, for the second
    assert count(postgres_database, "select current_version from models") == 0
    with pytest.raises(LeaseLost):
        fenced.commit([])
    second = AggregatorStore(store, holder="second", token=token, ttl=5.0, announcer=None)
    second.commit([])  # the new holder commits
    worker.close()


def test_a_resumed_aggregator_finding_pushes_on_newer_versions_stops_as_lease_lost(
    tmp_path, postgres_database
):
    """Paused past its lease while a second aggregator applied pushes, the first resumes to a queue of
    pushes on versions it never made: it applies none of them and stops as having lost its lease (it
    once fed a negative staleness to the strategy and crashed)."""
    from server.compose import build_coordinator, build_store
    from server.scale.aggregator import AggregatorStore, drain

    worker, first, first_store = cluster(tmp_path, postgres_database)
    store = build_store(settings_for(tmp_path, database_url=postgres_database))
    token = store.take_aggregator_lease("second", now=time.time() + 60, ttl=600.0)  # the first's lapsed
    second_store = AggregatorStore(store, holder="second", token=token, ttl=600.0, announcer=None)
    second = build_coordinator(
        settings_for(tmp_path, database_url=postgres_database, role="aggregator"), store=second_store
    )
    device, _ = worker.enroll("Galaxy S7")
    device = Device(device.device_id, device.device_model)
    n = worker.run.manifest.num_params
    for _ in range(2):
        grant = worker.request_task(TaskRequest(device, FEATURES, [5] * 10))
        worker.submit(device, grant.task_id, result(n))
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        assert drain(second, second_store, batch=16, stop=stop) == 1
        worker.follow()
    assert worker.run.version == 2 and first.run.version == 0
    grant = worker.request_task(TaskRequest(device, FEATURES, [5] * 10))
    assert grant.version == 2
    worker.submit(device, grant.task_id, result(n))
    with pytest.raises(LeaseLost):
        drain(first, first_store, batch=16, stop=threading.Event())
    assert first.run.version == 0
    assert count(postgres_database, "select count(*) from push_queue") == 1  # still queued, for the second
    assert count(postgres_database, "select current_version from models") == 2
    for core in (worker, first, second):
        core.close()


def test_a_database_error_while_draining_is_retried_not_fatal(tmp_path, postgres_database):
    """Paused mid-read past its lease, the aggregator's session is ended by PostgreSQL: the read fails
    once; the drain retries it (the fence, not the error, decides whether it may go on)."""
    from server.core.errors import StorageUnavailable
    from server.scale.aggregator import drain

    worker, aggregator, fenced = cluster(tmp_path, postgres_database)
    device, _ = worker.enroll("Galaxy S7")
    device = Device(device.device_id, device.device_model)
    grant = worker.request_task(TaskRequest(device, FEATURES, [5] * 10))
    worker.submit(device, grant.task_id, result(worker.run.manifest.num_params))
    failures = iter([True, False])

    class Flaky:
        def __getattr__(self, name: str) -> object:
            return getattr(fenced, name)

        def queued(self, limit: int, *, after: int = 0) -> list:
            if next(failures, False):
                raise StorageUnavailable("database unavailable: OperationalError")
            return fenced.queued(limit, after=after)

    stop = threading.Event()
    threading.Timer(2.0, stop.set).start()
    assert drain(aggregator, Flaky(), batch=16, stop=stop) == 1  # type: ignore[arg-type]
    assert count(postgres_database, "select count(*) from push_queue") == 0
    worker.close()


def test_dp_and_sqlite_are_refused_outside_the_single_process(tmp_path, postgres_database):
    from server.compose import build_coordinator

    with pytest.raises(ValueError, match="FLEET_ROLE=all"):
        build_coordinator(settings_for(tmp_path, role="api", dp=True, database_url=postgres_database))
    with pytest.raises(ValueError, match="needs PostgreSQL"):
        build_coordinator(settings_for(tmp_path, role="aggregator"))


def _exactly_once(phase: dict) -> None:
    assert phase["answers_5xx_not_503"] == 0, phase["server_errors"]
    assert phase["missing_retry_after"] == 0
    assert phase["acknowledged"] > 100
    assert phase["acknowledged_not_stored"] == 0 and phase["versions_made_twice"] == 0
    assert phase["exactly_once"]


@pytest.mark.slow
@needs_redis
def test_kill_9_of_a_worker_the_aggregator_and_redis_loses_nothing_acknowledged(tmp_path, postgres_database):
    from tests.support.topology import kill_phase

    phase = kill_phase(tmp_path, postgres_database, workers=2, devices=6, seconds=16)
    _exactly_once(phase)
    what = [event["what"] for event in phase["events"]]
    assert what[:2] == ["kill -9 an API worker", "a new API worker runs"] and phase["events"][1]["pids"]
    assert "a new aggregator holds the lease" in what and "Redis back" in what
    assert phase["drain_s"] < 60


@pytest.mark.slow
@needs_redis
def test_a_second_aggregator_applies_nothing_until_the_first_lapses_and_the_first_then_exits(
    tmp_path, postgres_database
):
    from fleet.topology import AggregatorProcess, Topology, drained
    from tests.support.chaos import USER_LIMITS, Load
    from tests.support.ledger import audit

    with Topology(tmp_path, postgres_database, workers=1, **USER_LIMITS) as topology:
        first = topology.aggregator
        load = Load(topology.url, 4, 12.0, tmp_path / "load.json")
        second = AggregatorProcess(tmp_path / "second", first.env).start(wait=False)
        deadline = time.monotonic() + 30
        while "waiting for it to lapse" not in second.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        assert "waiting for it to lapse" in second.log.read_text()
        assert "applying the queue" not in second.log.read_text()  # it holds nothing while the first lives
        os.kill(first.process.pid, signal.SIGSTOP)  # a GC pause, a frozen VM: past the 2 s lease
        deadline = time.monotonic() + 20
        while "applying the queue" not in second.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "applying the queue" in second.log.read_text()
        os.kill(first.process.pid, signal.SIGCONT)
        code = first.process.wait(timeout=20)
        assert code == 3, first.log.read_text()[-3000:]  # its next commit found its token stale: it exits
        assert "lost its lease" in first.log.read_text()
        result = load.result(timeout=120)
        drained(postgres_database)
        second.stop()
    ledger = audit(postgres_database, result["acknowledged"])
    assert ledger["acknowledged"] > 50 and ledger["exactly_once"], ledger


@pytest.mark.slow
@needs_redis
def test_devices_train_through_the_topology_to_80_percent(tmp_path, postgres_database):
    import httpx

    from fleet.process import ADMIN
    from fleet.topology import Topology
    from sim.data import write_shards
    from tests.test_end_to_end import start_workers

    shards, test_path = write_shards(tmp_path / "data", devices=3, partition="iid", seed=1)
    settings = dict(
        eval_data=test_path,
        eval_every_versions=10,
        eval_interval_s=1,
        target_accuracy=0.80,
        learning_rate=0.1,
        max_batch=64,
        time_slo_ms=500,
    )
    stop = threading.Event()
    with Topology(tmp_path / "topology", postgres_database, workers=2, **settings) as topology:
        start_workers(topology.url, shards, stop, [], max_seconds=150)
        admin = {"Authorization": f"Bearer {ADMIN}"}

        def stats() -> dict:
            return httpx.get(f"{topology.url}/v1/admin/stats", headers=admin, timeout=10).json()

        def status() -> object:  # what the database says: the aggregator applies the stop rule
            return scalar(postgres_database, "select status from models")

        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and status() != "finished":
            time.sleep(0.5)
        stop.set()
        time.sleep(1.5)  # each API worker follows the stored status within a second
        finals = [stats() for _ in range(6)]  # fresh connections: both workers answer some of them
        final = finals[-1]
        assert all(f["status"] == "finished" for f in finals), finals
        evaluations = httpx.get(f"{topology.url}/v1/admin/evaluations", headers=admin, timeout=10).json()
    assert final["status"] == "finished", final
    assert max(e["accuracy"] for e in evaluations) >= 0.80
    assert (
        count(postgres_database, "select count(*) from tasks where status = 'applied'")
        >= final["version"]
        > 0
    )
