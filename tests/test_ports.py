"""The core's seams: it runs on any Store and Profiler, the journal's checkpoints match their pushes,
the wire contract is the one both sides use, and the client carries no server code."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import fields

import numpy as np
import pytest

from fleet_protocol import PushMeta, TaskAsk
from models.manifest import builtin
from profiler import IProf
from profiler.dispatch import with_maui_baseline
from profiler.maui import MauiProfiler
from server.api.schemas import ResultMeta, TaskIn
from server.core.coordinator import Coordinator
from server.core.errors import StorageUnavailable
from server.core.events import PushApplied, StateCheckpoint
from server.core.ports import BatchDecision, Profiler, Store
from server.core.types import Device, TaskGrant, TaskRequest, TaskResult
from server.ratelimit import RateLimiter
from server.store.sql import SqlStore
from server.strategies import STRATEGIES, make_strategy
from sim.harness import BatchSizer
from tests.conftest import FEATURES
from tests.memory_store import MemoryStore
from tests.test_no_torch import run_isolated


def result(n: int, value: float, task_id: str) -> TaskResult:
    gradient = np.full(n, value, np.float32)
    digest = hashlib.sha256(gradient.tobytes() + task_id.encode()).hexdigest()
    return TaskResult(np.full(10, 1), 1.0, 100.0, None, 10, gradient, digest)


def core_on(store: MemoryStore, *, durable: bool = True, **parts: object) -> Coordinator:
    coordinator = Coordinator(
        store=store,
        profiler=BatchSizer(mean=10),
        strategy_factory=lambda: make_strategy("fedavg-async", learning_rate=0.1, k=1),
        durable=durable,
        **parts,  # type: ignore[arg-type]
    )
    coordinator.start()
    return coordinator


def test_the_core_runs_and_restarts_on_an_in_memory_store():
    store = MemoryStore()
    assert isinstance(store, Store) and isinstance(SqlStore.__new__(SqlStore), Store)
    core = core_on(store)
    core.add_model(builtin("mlp"), actor="test")
    device, token = core.enroll("Pixel")
    n = core.run.manifest.num_params
    grants = [core.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3))) for _ in range(3)]
    assert all(isinstance(g, TaskGrant) for g in grants)
    outcomes = [
        core.submit(device, g.task_id, result(n, 0.01 * (i + 1), g.task_id)) for i, g in enumerate(grants)
    ]
    core.record_evaluation(core.run.model_id, core.run.version, 0.5, 1.2)
    core.set_stop(target_accuracy=None, max_versions=10)
    params = core.run.params.copy()
    # every acknowledged thing is in the store, with no flush or close: the push waited for its commit
    restarted = core_on(store)
    assert restarted.run.version == 3 and restarted.run.stop_versions == 10
    np.testing.assert_array_equal(restarted.run.params, params)
    assert restarted.devices.authenticate(token) == device
    assert restarted.evaluations(core.run.model_id)[-1]["accuracy"] == 0.5
    retry = restarted.submit(device, grants[0].task_id, result(n, 0.01, grants[0].task_id))
    assert retry.duplicate and retry.version == outcomes[0].version
    assert [r.version for r in restarted.catalog.versions(core.run.model_id)] == [0, 1, 2, 3]
    core.close()
    restarted.close()


def test_the_roles_differ_by_the_parts_injected_not_by_subclasses():
    """The checks a push must pass and the sink it goes to are the coordinator's constructor arguments
    (server/core/pushes.py): what the scale-out roles are made of (server/compose.py ``role_parts``)."""
    from server.core.errors import InvalidInput
    from server.core.pushes import TRUSTED, Push

    class NoLoss:
        def check(self, push: Push) -> None:
            if push.result.loss > 0.5:
                raise InvalidInput("loss too high")

    class Recorded:
        def __init__(self, inner: object) -> None:
            self.inner, self.seen = inner, []

        def accept(self, push: Push):  # type: ignore[no-untyped-def]
            self.seen.append(push.lease.task_id)
            return self.inner.accept(push)  # type: ignore[attr-defined]

    store = MemoryStore()
    strict = core_on(store, checks=[NoLoss()])
    strict.add_model(builtin("mlp"), actor="test")
    device, _ = strict.enroll("Pixel")
    n = strict.run.manifest.num_params
    grant = strict.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
    with pytest.raises(InvalidInput, match="loss too high"):
        strict.submit(device, grant.task_id, result(n, 0.01, grant.task_id))  # loss 1.0
    strict.close()
    trusting = core_on(store, checks=TRUSTED)  # the aggregator's: not even the norm bound is checked
    sink = trusting.sink = Recorded(trusting.sink)
    grant = trusting.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
    outcome = trusting.submit(device, grant.task_id, result(n, 1e6, grant.task_id))
    assert outcome.applied and sink.seen == [grant.task_id]
    trusting.close()


def test_a_failed_commit_fails_its_push_and_reloads_the_last_durable_state():
    store = MemoryStore()
    core = core_on(store)
    core.add_model(builtin("mlp"), actor="test")
    device, _ = core.enroll("Pixel")
    grant = core.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
    core.journal.flush()
    store.fail_next = True
    n = core.run.manifest.num_params
    with pytest.raises(StorageUnavailable, match="disk full"):
        core.submit(device, grant.task_id, result(n, 0.01, grant.task_id))
    assert core.run.version == 0
    assert core.submit(device, grant.task_id, result(n, 0.01, grant.task_id)).version == 1
    core.close()


def test_each_checkpoint_matches_exactly_the_pushes_committed_with_it():
    """The journal's guarantee under concurrency: the strategy state written with a batch counts exactly
    the pushes written up to and including that batch (fedavg-async with k=1: one update per push)."""
    store = MemoryStore()
    core = core_on(store)
    core.add_model(builtin("mlp"), actor="test")
    n = core.run.manifest.num_params
    devices = [core.enroll(f"Phone {i}")[0] for i in range(6)]

    def device_loop(device: Device) -> None:
        for _ in range(15):
            grant = core.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 3)))
            core.submit(device, grant.task_id, result(n, 1e-4, grant.task_id))

    threads = [threading.Thread(target=device_loop, args=(d,)) for d in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    core.close()
    pushes, checked = 0, 0
    for batch in store.batches:
        pushes += sum(isinstance(e, PushApplied) for e in batch)
        for event in batch:
            if isinstance(event, StateCheckpoint) and event.strategy is not None:
                assert event.strategy["updates"] == pushes
                checked += 1
    assert pushes == 90 and checked >= 1
    assert len(store.batches) < 90 + 6 + 2  # pushes shared commits (group commit), not one each


def test_every_profiler_conforms_to_the_port_and_returns_the_one_decision_type():
    iprof = IProf(time_slo_ms=1000.0, max_batch=500).fit_prior()
    maui = MauiProfiler(time_slo_ms=1000.0).fit([10.0, 20.0], [100.0, 210.0])
    profilers = [iprof, maui, with_maui_baseline(IProf(time_slo_ms=1000.0).fit_prior()), BatchSizer(mean=7)]
    for profiler in profilers:
        assert isinstance(profiler, Profiler), type(profiler).__name__
        decision = profiler.batch_size("Pixel", FEATURES)
        assert type(decision) is BatchDecision and decision.batch_size >= 1
        profiler.observe("Pixel", FEATURES, decision.batch_size, 50.0 * decision.batch_size, None)
    # fit: θ̂ = ΣLt/ΣL² = 5200/500 → L = 96; then (96, 4800 ms) observed: θ̂ = 466000/9716 → L = 20
    assert maui.batch_size("Pixel", FEATURES).batch_size == 20
    assert BatchSizer(mean=7).batch_size("x", {}).batch_size == 7


def test_server_input_schemas_follow_the_wire_contract():
    assert set(ResultMeta.model_fields) == {f.name for f in fields(PushMeta)}
    assert set(TaskIn.model_fields) == {f.name for f in fields(TaskAsk)}


def test_each_strategy_declares_its_settings():
    from server.compose import strategy_params
    from server.settings import Settings

    for name, cls in STRATEGIES.items():
        assert {"name", "learning_rate", "k", "time_window"} <= set(cls.settings.model_fields)
        dp = getattr(cls, "needs_dp", None) is not None  # audp, mapa: refused without DP (settings_rules)
        params = strategy_params(
            Settings(strategy=name, learning_rate=0.1, k=2, time_window=3.0, dp=dp, _env_file=None)
        )
        assert {"learning_rate", "k", "time_window"} <= set(params)
        assert repr(cls(**params))  # the strategy accepts exactly what it declares
        # and its own defaults
        assert repr(cls(**strategy_params(Settings(strategy=name, dp=dp, _env_file=None))))
    assert "over_selection" in strategy_params(Settings(strategy="ssgd", _env_file=None))
    assert "percentile" not in strategy_params(Settings(strategy="fedbuff", _env_file=None))


def test_the_client_imports_no_server_code():
    last = run_isolated("""
        import sys
        import client, client._worker, client._transport, fleet_protocol
        heavy = ("server", "sqlalchemy", "fastapi", "pydantic", "sklearn", "torch", "profiler", "sim")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
    """)
    assert last == "[]"


def test_the_rate_limiter_stays_bounded_and_still_limits():
    now = [0.0]
    limiter = RateLimiter(rate=10.0, burst=3, clock=lambda: now[0], max_buckets=1000)
    for i in range(20_000):  # many devices, each seen once, 1 ms apart
        now[0] += 0.001
        assert limiter.acquire(f"d{i}") == 0.0
    assert len(limiter) <= 301  # only the buckets not yet refilled (burst / rate = 0.3 s = 300 devices)
    assert [limiter.acquire("hot") == 0.0 for _ in range(4)] == [True, True, True, False]
    now[0] += 0.1
    assert limiter.acquire("hot") == 0.0  # refilled one token in 0.1 s
    tight = RateLimiter(rate=1e-6, burst=1, clock=lambda: now[0], max_buckets=50)
    for i in range(500):
        tight.acquire(f"d{i}")
    assert len(tight) == 50
