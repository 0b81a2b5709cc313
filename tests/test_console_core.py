"""What the console asks of the core and of storage: revocation, enrollment keys, promotion and
rollback, live reconfiguration, and bounded read queries; on the in-memory store, SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import insert, inspect, select

from models.manifest import builtin
from server.core.coordinator import Coordinator
from server.core.errors import Conflict, Gone, NotFound
from server.core.events import (
    DeviceEnrolled,
    DeviceRevoked,
    EvaluationRecorded,
    HeadPromoted,
    NewVersion,
    PushApplied,
    StateCheckpoint,
    TaskGranted,
    VersionNoted,
)
from server.core.journal import Batch
from server.core.ports import Store
from server.core.promotion import SUPERSEDED
from server.core.types import Device, TaskGrant, TaskRequest, TaskResult
from server.store.database import MIGRATIONS, make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.store.tables import Base, DeviceRow
from server.strategies import make_strategy
from sim.harness import BatchSizer
from tests.conftest import ENROLL, FEATURES
from tests.support.stores import BACKENDS, started_cores, store_factory

RETENTION = 4


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Factory of stores on one storage: calling it again is a restart."""
    with store_factory(request.param, tmp_path, version_retention=RETENTION) as make:
        yield make


@pytest.fixture
def make_core(make_store: Callable[[], Store]) -> Iterator[Callable[..., Coordinator]]:
    """Factory of started coordinators on the same storage (closed at teardown)."""
    with started_cores(make_store) as make:

        def core(*, learning_rate: float = 0.1, with_model: bool = True) -> Coordinator:
            return make(
                with_model=with_model,
                profiler=BatchSizer(mean=10),
                strategy_factory=lambda: make_strategy("fedavg-async", learning_rate=learning_rate, k=1),
                version_retention=RETENTION,
            )

        yield core


def result(n: int, value: float, task_id: str) -> TaskResult:
    gradient = np.full(n, value, np.float32)
    digest = hashlib.sha256(gradient.tobytes() + task_id.encode()).hexdigest()
    return TaskResult(np.full(10, 1), 1.0, 100.0, None, 10, gradient, digest)


def grant(core: Coordinator, device: Device) -> TaskGrant:
    answer = core.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
    assert isinstance(answer, TaskGrant), answer
    return answer


def push(core: Coordinator, device: Device, task: TaskGrant, value: float = 0.01) -> int:
    """Answer ``task``; returns the version after it (fedavg-async with K = 1: one step per push)."""
    return core.submit(
        device, task.task_id, result(core.run.manifest.num_params, value, task.task_id)
    ).version


# -- schema ----------------------------------------------------------------------------------------
def alembic_config(connection) -> Config:  # type: ignore[no-untyped-def]
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def test_migrations_build_exactly_the_tables_and_go_down_and_up_again(database_url):
    engine = make_engine(database_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        connection.execute(
            insert(DeviceRow.__table__).values(
                id="d-1", device_model="Pixel", token_hash="h", created_at=1.0, last_seen=2.0, tasks_applied=3
            )
        )
    migrate(engine)  # 0001 -> head, with a device row to carry over
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        row = connection.execute(select(DeviceRow.__table__)).mappings().one()
        assert (row["tasks_applied"], row["last_features"], row["revoked_at"]) == (3, None, None)
    names = set(inspect(engine).get_table_names())
    console = {"enrollment_keys", "admin_users", "admin_sessions", "settings_overrides", "promotions"}
    assert console <= names
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")
    assert not console & set(inspect(engine).get_table_names())
    migrate(engine)
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    engine.dispose()


# -- devices -----------------------------------------------------------------------------------------
def test_a_revoked_device_no_longer_authenticates_even_after_a_restart(make_core):
    core = make_core()
    device, token = core.enroll("Pixel")
    other, other_token = core.enroll("Pixel")
    assert core.devices.authenticate(token) == device and core.devices.cached(token) == device
    task = grant(core, device)
    core.revoke_device(device.device_id, actor="alice")
    assert core.devices.authenticate(token) is None and core.devices.cached(token) is None
    core.revoke_device(device.device_id, actor="alice")  # idempotent
    with pytest.raises(NotFound):
        core.revoke_device("d-unknown", actor="alice")
    assert core.devices.authenticate(other_token) == other
    assert core.leases.get(task.task_id) is not None  # its lease stays as it was
    record = core.store.device(device.device_id)
    assert record is not None and record.revoked_at is not None
    restarted = make_core()
    assert restarted.devices.authenticate(token) is None
    assert restarted.devices.authenticate(other_token) == other


def test_a_grant_records_last_seen_and_features_and_a_push_counts_as_applied(make_core):
    core = make_core()
    device, _ = core.enroll("Pixel")
    before = time.time()
    task = grant(core, device)
    push(core, device, task)
    push(core, device, grant(core, device))
    core.journal.flush()
    record = core.store.device(device.device_id)
    assert record is not None
    assert record.last_features == FEATURES and record.last_seen >= before
    assert record.tasks_applied == 2


# -- enrollment keys ---------------------------------------------------------------------------------
def test_enrollment_keys_are_stored_hashed_and_revocation_takes_effect_at_once(make_core):
    core = make_core()
    registry = core.devices
    key, secret = registry.create_enrollment_key("field team", actor="alice")
    assert key.name == "field team" and key.created_by == "alice" and key.revoked_at is None
    assert registry.enrollment_keys() == [key]
    assert registry.enrollment_key_valid(secret) and registry.enrollment_key_valid(secret)  # 2nd: cached
    assert not registry.enrollment_key_valid("not-a-key")
    assert core.store.enrollment_key_by_hash(hashlib.sha256(secret.encode()).hexdigest()) == key
    registry.revoke_enrollment_key(key.key_id, actor="bob")
    assert not registry.enrollment_key_valid(secret)
    registry.revoke_enrollment_key(key.key_id, actor="bob")  # idempotent
    with pytest.raises(NotFound):
        registry.revoke_enrollment_key("k-unknown", actor="bob")
    restarted = make_core()
    [stored] = restarted.devices.enrollment_keys()
    assert stored.key_id == key.key_id and stored.revoked_at is not None
    assert not restarted.devices.enrollment_key_valid(secret)


def test_the_api_enrolls_with_a_created_key_and_refuses_a_revoked_one(make_api):
    api = make_api()
    registry = api.coordinator.devices
    key, secret = registry.create_enrollment_key("lab", actor="alice")
    enrolled = api.http.post("/v1/devices", json={"enrollment_key": secret, "device_model": "Pixel"})
    assert enrolled.status_code == 201, enrolled.text
    registry.revoke_enrollment_key(key.key_id, actor="alice")
    refused = api.http.post("/v1/devices", json={"enrollment_key": secret, "device_model": "Pixel"})
    assert refused.status_code == 401 and refused.json()["detail"] == "wrong enrollment key"
    assert (
        api.http.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "X"}).status_code == 201
    )


def test_the_api_answers_410_to_a_push_of_a_task_granted_before_a_promotion(make_api):
    api = make_api()
    headers = api.enroll()
    task = api.task(headers).json()
    model_id = api.coordinator.run.model_id
    api.coordinator.promote(model_id, 0, actor="alice")
    n = api.coordinator.run.manifest.num_params
    stale = api.push(headers, task["task_id"], np.zeros(n, np.float32))
    assert stale.status_code == 410 and stale.json()["detail"] == SUPERSEDED
    fresh = api.task(headers).json()
    assert fresh["version"] == 1
    assert api.push(headers, fresh["task_id"], np.zeros(n, np.float32)).status_code == 200


# -- promotion and rollback --------------------------------------------------------------------------
def test_promoting_an_old_version_makes_its_params_a_new_head_and_rollback_restores_the_last(make_core):
    core = make_core()
    model_id = core.run.model_id
    device, _ = core.enroll("Pixel")
    for step in range(3):
        assert push(core, device, grant(core, device), 0.01 * (step + 1)) == step + 1
    v0, v3 = core.catalog.params(model_id, 0).copy(), core.run.params.copy()
    stale = grant(core, device)
    buffered = core.run.strategy
    assert core.promote(model_id, 0, actor="alice") == (model_id, 4)
    assert core.run.strategy is not buffered and core.run.status == "training"
    np.testing.assert_array_equal(core.catalog.params(model_id, 4), v0)
    np.testing.assert_array_equal(core.run.params, v0)
    fresh = grant(core, device)
    assert fresh.version == 4
    with pytest.raises(Gone, match=SUPERSEDED):
        push(core, device, stale)
    promotion = core.store.last_promotion()
    assert promotion is not None
    assert (promotion.model_id, promotion.version, promotion.source_version) == (model_id, 4, 0)
    assert (promotion.previous_model_id, promotion.previous_version, promotion.actor) == (
        model_id,
        3,
        "alice",
    )

    core.journal.flush()  # a clean restart: the grant still gathering in the journal is written first
    restarted = make_core()  # the promoted head and the refusal of older tasks survive a restart
    assert (restarted.run.version, restarted.run.floor) == (4, 4)
    np.testing.assert_array_equal(restarted.catalog.params(model_id, 4), v0)
    with pytest.raises(Gone, match=SUPERSEDED):
        push(restarted, device, stale)
    assert push(restarted, device, fresh) == 5
    assert restarted.rollback(actor="bob") == (model_id, 6)  # undoes the promotion: v3's params as v6
    np.testing.assert_array_equal(restarted.catalog.params(model_id, 6), v3)
    np.testing.assert_array_equal(restarted.run.params, v3)
    assert restarted.store.model(model_id).current_version == 6


def test_a_promotion_reports_its_own_version_when_a_push_lands_while_it_is_written(make_core):
    """Devices keep pushing on the new head while the promotion's event is being committed: the version
    returned is the promoted one (holding the old parameters), not whatever the head became since."""
    core = make_core()
    model_id = core.run.model_id
    device, _ = core.enroll("Pixel")
    for _ in range(2):
        push(core, device, grant(core, device))
    record = core.journal.record

    def record_then_push_while_waiting(event):  # type: ignore[no-untyped-def]
        ticket = record(event)
        if type(event).__name__ != "HeadPromoted":
            return ticket
        wait = ticket.wait

        def wait_with_a_push() -> None:
            push(core, device, grant(core, device))  # a device answers a task on the new head
            wait()

        ticket.wait = wait_with_a_push
        return ticket

    core.journal.record = record_then_push_while_waiting
    promoted = core.promote(model_id, 0, actor="alice")
    assert promoted == (model_id, 3) and core.run.version == 4
    np.testing.assert_array_equal(core.catalog.params(model_id, 3), core.catalog.params(model_id, 0))


def test_promoting_another_model_makes_it_the_active_one(make_core):
    core = make_core()
    first = core.run.model_id
    device, _ = core.enroll("Pixel")
    push(core, device, grant(core, device))
    push(core, device, grant(core, device))
    first_v1 = core.catalog.params(first, 1).copy()
    second = core.add_model(builtin("mlp"), name="second", actor="test").model_id
    stale = grant(core, device)
    assert core.promote(first, 1, actor="alice") == (first, 3)
    assert core.run.model_id == first and core.catalog.active().model_id == first
    assert {m.model_id: m.active for m in core.store.models()} == {first: True, second: False}
    np.testing.assert_array_equal(core.catalog.params(first, 3), first_v1)
    with pytest.raises(Gone, match=SUPERSEDED):
        push(core, device, stale)
    assert grant(core, device).version == 3
    assert core.rollback(actor="alice") == (second, 1)  # the replaced head was the second model at 0
    assert make_core().run.model_id == second


def test_a_promotion_refuses_unknown_versions_and_versions_past_retention(make_core):
    core = make_core()
    model_id = core.run.model_id
    with pytest.raises(Conflict):
        core.rollback(actor="alice")
    device, _ = core.enroll("Pixel")
    for _ in range(RETENTION + 2):
        push(core, device, grant(core, device))
    core.journal.flush()
    with pytest.raises(NotFound):
        core.promote("no-such-model", 0, actor="alice")
    with pytest.raises(NotFound):
        core.promote(model_id, 99, actor="alice")
    with pytest.raises(Gone):
        core.promote(model_id, 1, actor="alice")  # 6 versions with 4 retained: 1 is gone (0 is kept)
    assert core.promote(model_id, 0, actor="alice") == (model_id, RETENTION + 3)


def test_a_promotion_written_before_older_pushes_in_one_batch_keeps_the_newest_head(make_core):
    """The journal writes other events before the answers of a batch: a push's version written after a
    promotion's must not move the head back."""
    core = make_core()
    model_id = core.run.model_id
    store = core.store
    params = core.catalog.params_bytes(model_id, 0)
    granted = TaskGranted("t-1", model_id, "d-1", "Pixel", 0, 10, None, {}, None, None, 1.0, 99.0)
    answered = PushApplied(
        "t-1", "d-1", "Pixel", "x", {}, 0, 1.0, 10, 5.0, None, None, None, 1.0, 2.0,
        new_version=NewVersion(model_id, 1, params),
    )  # fmt: skip
    promoted = HeadPromoted(model_id, 2, 0, params, model_id, 1, "alice", 2.0)
    store.commit([granted])
    store.commit([promoted, answered])
    assert store.model(model_id).current_version == 2
    assert [r.version for r in store.versions(model_id)] == [0, 1, 2]


def test_an_evaluation_and_a_note_of_a_version_made_in_the_same_batch_are_kept(make_core):
    """The push that makes a version and an evaluation (with the average it scored) or a note of it can
    share a batch under load; both update the version's row, so they are written after the answers."""
    core = make_core()
    model_id, store = core.run.model_id, core.store
    params = core.catalog.params_bytes(model_id, 0)
    served = np.full(core.run.manifest.num_params, 0.5, "<f4").tobytes()
    batch = Batch()
    for event in (
        TaskGranted("t-1", model_id, "d-1", "Pixel", 0, 10, None, {}, None, None, 1.0, 99.0),
        PushApplied(
            "t-1", "d-1", "Pixel", "x", {}, 0, 1.0, 10, 5.0, None, None, None, 1.0, 2.0,
            new_version=NewVersion(model_id, 1, params),
        ),
        EvaluationRecorded(model_id, 1, 0.5, 1.0, 2.0, served=served),
        VersionNoted(model_id, 1, "scored", "alice", 2.0),
    ):  # fmt: skip
        batch.add(event)
    store.commit(batch.events(StateCheckpoint()))
    assert store.served_params(model_id, 1) == served
    assert [r.note for r in store.versions(model_id) if r.version == 1] == ["scored"]


# -- live reconfiguration ----------------------------------------------------------------------------
def test_reconfigure_changes_the_learning_rate_of_the_next_step_and_keeps_the_state(make_core):
    core = make_core(learning_rate=0.1)
    device, _ = core.enroll("Pixel")
    before = core.run.params.copy()
    push(core, device, grant(core, device), 0.01)
    small = float(np.abs(core.run.params - before).max())
    core.reconfigure(
        strategy_factory=lambda: make_strategy("fedavg-async", learning_rate=1.0, k=1),
        lease_seconds=5.0,
        max_gradient_norm=50.0,
    )
    assert core.run.strategy.describe()["learning_rate"] == 1.0
    assert core.run.strategy.updates == 1  # same class: its state carried over
    assert (core.lease_seconds, core.max_gradient_norm) == (5.0, 50.0)
    task = grant(core, device)
    assert task.lease_seconds == 5.0
    before = core.run.params.copy()
    push(core, device, task, 0.01)
    assert float(np.abs(core.run.params - before).max()) == pytest.approx(10 * small, rel=1e-3)
    core.reconfigure(strategy_factory=lambda: make_strategy("dynsgd", learning_rate=0.2))
    assert core.run.strategy.describe()["strategy"] == "dynsgd" and core.run.strategy.updates == 0
    core.journal.flush()
    assert core.store.strategy_state(core.run.model_id)["updates"] == 0  # a restart loads the new state


# -- the console's read queries ----------------------------------------------------------------------
def test_the_console_queries_page_count_and_bucket(make_store):
    store = make_store()
    events: list = [
        DeviceEnrolled(f"d-{i}", "Pixel" if i % 2 else "Galaxy", f"h{i}", float(i)) for i in range(6)
    ]
    # d-0..d-5 last seen at 100 + i via a grant each; tasks of model m answered at minutes 1 and 2
    events += [
        TaskGranted(f"t-{i}", "m", f"d-{i}", "x", 0, 10, None, {"i": i}, None, None, 100.0 + i, 200.0 + i)
        for i in range(6)
    ]
    store.commit(events)
    answers = [
        PushApplied(f"t-{i}", f"d-{i}", "x", "x", {}, 0, 1.0, 10, 5.0, None, None, None, 1.0, at)
        for i, at in enumerate([60.0, 61.5, 119.9, 120.0])
    ]
    store.commit(answers)
    store.commit([TaskGranted("t-other", "m2", "d-0", "x", 0, 10, None, {}, None, None, 90.0, 95.0)])
    assert store.task_counts("m") == {"applied": 4, "open": 2}
    assert store.task_counts("nothing") == {}
    assert store.answers_per_minute("m", 0.0) == [(60.0, 3), (120.0, 1)]
    assert store.answers_per_minute("m", 61.0) == [(60.0, 2), (120.0, 1)]
    assert store.answers_per_minute("m", 1e9) == []
    page = store.devices(offset=0, limit=4)
    assert [d.device_id for d in page] == ["d-5", "d-4", "d-3", "d-2"]
    assert page[0].last_seen == 105.0 and page[0].last_features == {"i": 5} and page[0].tasks_applied == 0
    assert [d.device_id for d in store.devices(offset=4, limit=4)] == ["d-1", "d-0"]
    assert [d.device_id for d in store.devices(device_model="Pixel")] == ["d-5", "d-3", "d-1"]
    assert store.device(f"d-{3}").tasks_applied == 1
    store.commit([DeviceRevoked("d-5", "alice", 300.0)])
    counts = store.device_model_counts(now=400.0, active_within_s=300.0)  # seen at >= 100
    assert counts == {"Pixel": (3, 2, 105.0), "Galaxy": (3, 2, 104.0)}  # d-0 was last seen at 90
    assert store.device_model_counts(now=403.5)["Galaxy"] == (3, 1, 104.0)
    assert store.last_promotion() is None and store.enrollment_keys() == []


def test_the_console_queries_answer_at_a_thousand_devices_and_ten_thousand_tasks(database_url):
    """The 50 ms target is the benchmark's (`python -m lab run console`, docs/results/console-pages.md): a
    timed unit test failed on a loaded machine (150 ms). Here, a guard against a page gone pathological."""
    engine = make_engine(database_url)
    migrate(engine)
    store = SqlStore(session_factory(engine))
    now = 1_700_000_000.0
    store.commit([DeviceEnrolled(f"d-{i}", f"Phone {i % 20}", f"h{i}", now - 7200) for i in range(1000)])
    granted = [
        TaskGranted(f"t-{i}", "m", f"d-{i % 1000}", "x", 0, 10, None, dict(FEATURES), None, None, t, t + 60)
        for i in range(10_000)
        for t in [now - 3600 + i * 0.36]
    ]
    store.commit(granted)
    store.commit(
        [
            PushApplied(
                g.task_id, g.device_id, "x", "x", {}, 0, 1.0, 10, 5.0, None, None, None, 1.0, g.created_at + 5
            )
            for g in granted[::2]
        ]
    )

    def page() -> None:
        store.devices(offset=500, limit=100)
        store.devices(limit=100, device_model="Phone 3")
        store.device_model_counts(now)
        store.task_counts("m")
        store.answers_per_minute("m", now - 3600)
        store.last_promotion()
        store.enrollment_keys()
        store.count_devices()

    page()  # warm the connection pool
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        page()
        timings.append(time.perf_counter() - started)
    assert min(timings) < 2.0, timings
    assert len(store.answers_per_minute("m", now - 3600)) in (60, 61)
    assert sum(n for _, n in store.answers_per_minute("m", now - 3600)) == 5000
    engine.dispose()
