"""Issue 29, health: the coordinator calls itself degraded (or down), with the right reason, within 30 s of
each failure an operator met with the console still saying "Training". The core runs in process with a
clock the test moves; storage is the in-memory store, made to hang or to fail where a test needs it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from models.manifest import builtin
from server.core.coordinator import Coordinator
from server.core.errors import InvalidInput, StorageUnavailable
from server.core.health import DEGRADED, DOWN, OK, HealthPolicy, Outcome, Signals, accuracy_fall, assess
from server.core.privacy import PrivacyPolicy
from server.core.types import Rejection, TaskGrant, TaskRequest, TaskResult
from server.strategies import make_strategy
from sim.harness import BatchSizer
from tests.conftest import FEATURES
from tests.memory_store import MemoryStore
from tests.test_privacy_ledger import ask, dp_core


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def make_core(clock: Clock, store: MemoryStore | None = None, **policy: float) -> Coordinator:
    core = Coordinator(
        store=store or MemoryStore(),
        profiler=BatchSizer(mean=10),
        strategy_factory=lambda: make_strategy("dynsgd", learning_rate=0.1),
        clock=clock,
        health=HealthPolicy(**policy),
    )
    core.start()
    core.add_model(builtin("logreg"))
    return core


def grant(core: Coordinator, device) -> TaskGrant:
    answer = core.request_task(TaskRequest(device, dict(FEATURES), np.full(10, 5)))
    assert isinstance(answer, TaskGrant), answer
    return answer


def push(core: Coordinator, device, gradient: float = 0.01) -> None:
    task = grant(core, device)
    n = core.run.manifest.num_params
    result = TaskResult(
        np.ones(10), 1.0, 10.0, None, task.batch_size, np.full(n, gradient, "<f4"), task.task_id
    )
    core.submit(device, task.task_id, result)


def health(core: Coordinator):
    core.journal.flush()  # what is queued is committed: only a hung store leaves a backlog
    return core.health()


def degraded_by(
    core: Coordinator, clock: Clock, code: str, *, within: float = 30.0, step: float = 1.0
) -> float:
    """Seconds until ``code`` is among the reasons (and the state is not ok), moving the clock by ``step``;
    fails if that takes longer than ``within``."""
    waited = 0.0
    while code not in (h := health(core)).codes():
        assert waited < within, f"still {h} after {waited:.0f} s"
        clock.advance(step)
        waited += step
    assert h.state != OK
    return waited


# -- the checks alone ---------------------------------------------------------------------------------------
def test_nothing_wrong_is_ok_and_the_worst_reason_sets_the_state():
    now = 1000.0
    fine = Signals(now=now, devices=3, last_push_at=now - 1, training_since=now - 100)
    assert assess(fine) == assess(fine, HealthPolicy()) and assess(fine).state == OK
    both = Signals(now=now, storage_error="gone", devices=3, last_push_at=now - 100, training_since=now - 200)
    result = assess(both)
    assert result.state == DOWN and result.codes() == {"storage_unavailable", "no_pushes"}
    assert [r["code"] for r in result.to_dict()["reasons"]] == ["storage_unavailable", "no_pushes"]
    assert assess(Signals(now=now, model_loaded=False)).codes() == {"no_model"}


def test_most_devices_failing_counts_each_devices_latest_three():
    now = 1000.0
    ok = [Outcome(now - 50 + i, f"d{d}", True) for i in range(10) for d in range(4)]
    two_failing = [Outcome(now - 5 + i, f"d{d}", False) for i in range(2) for d in range(2)]
    assert assess(Signals(now=now, outcomes=(*ok, *two_failing))).state == OK  # 2 of 4: not most
    three = [Outcome(now - 5 + i, f"d{d}", False) for i in range(2) for d in range(3)]
    assert assess(Signals(now=now, outcomes=(*ok, *three))).codes() == {"devices_failing"}
    stale = [Outcome(now - 500, f"d{d}", False) for d in range(4)]  # outside the window: forgotten
    assert assess(Signals(now=now, outcomes=tuple(stale))).state == OK


def test_accuracy_falling_needs_a_drop_beyond_the_noise():
    assert accuracy_fall([0.5, 0.6, 0.7, 0.72, 0.71], 0.05) is None  # still rising
    assert accuracy_fall([0.7, 0.72, 0.71, 0.6, 0.58], 0.05) == pytest.approx((0.72, 0.59))
    noisy = [0.5, 0.7, 0.5, 0.7, 0.62, 0.6]  # swings of 0.2 up and down: a 0.1 dip is noise
    assert accuracy_fall(noisy, 0.05) is None
    assert accuracy_fall([0.7, float("nan"), 0.7], 0.05) is None  # too few finite values


# -- each failure, driven through the core ----------------------------------------------------------------
def test_no_pushes_while_devices_are_enrolled_turns_degraded_within_30_s():
    clock = Clock()
    core = make_core(clock)
    devices = [core.enroll("Pixel")[0] for _ in range(3)]
    for device in devices:
        push(core, device)
    assert health(core).state == OK
    waited = degraded_by(core, clock, "no_pushes")  # every device worker crashed just now
    assert waited == 20.0 and health(core).state == DEGRADED
    core.pause()  # paused: no push is expected
    assert "no_pushes" not in health(core).codes()
    core.resume()  # the silence counts from the resume
    assert health(core).state == OK
    clock.advance(21)
    assert health(core).codes() == {"no_pushes"}
    push(core, devices[0])  # one device is back
    assert health(core).state == OK
    core.close()


def test_most_devices_declining_turns_degraded_within_30_s():
    clock = Clock()
    core = make_core(clock)
    devices = [core.enroll("Pixel")[0] for _ in range(4)]
    for _ in range(5):
        for device in devices:
            push(core, device)
            clock.advance(1)
    assert health(core).state == OK
    start = clock()
    while "devices_failing" not in health(core).codes():  # three of four now decline every task
        assert clock() - start < 30
        for device in devices[:3]:
            core.decline(device, grant(core, device).task_id, reason="dp_terms_unsupported")
        push(core, devices[3])
        clock.advance(2)
    assert health(core).state == DEGRADED and "2 devices" not in str(health(core).reasons)
    assert health(core).reasons[0].message.startswith("3 of 4 devices")
    core.close()


def test_most_devices_pushing_refused_gradients_turns_degraded():
    clock = Clock()
    core = make_core(clock)
    devices = [core.enroll("Pixel")[0] for _ in range(2)]
    for device in devices:
        push(core, device)
    for _ in range(2):
        for device in devices:
            with pytest.raises(InvalidInput):
                push(core, device, gradient=float("nan"))
            clock.advance(1)
    assert health(core).codes() == {"devices_failing"}
    core.close()


def test_every_device_out_of_privacy_budget_turns_degraded():
    core = dp_core(MemoryStore(), PrivacyPolicy(clip=1.0, noise_multiplier=3.0, epsilon_budget=2.0), batch=48)
    first, second = core.enroll("Pixel")[0], core.enroll("Pixel")[0]

    def exhaust(device) -> None:
        for _ in range(200):
            if isinstance(answer := ask(core, device), Rejection):
                assert answer.reason == "privacy_budget_exhausted"
                return
        raise AssertionError("the budget never ran out")

    exhaust(first)
    assert "privacy_exhausted" not in health(core).codes()  # one device can still train
    exhaust(second)
    result = health(core)
    assert result.state == DEGRADED and "privacy_exhausted" in result.codes()
    assert "Every device (2)" in next(r.message for r in result.reasons if r.code == "privacy_exhausted")
    core.close()


def test_accuracy_falling_over_recent_evaluations_turns_degraded():
    clock = Clock()
    core = make_core(clock)
    model = core.run.model_id
    for version, accuracy in enumerate([0.4, 0.55, 0.66, 0.70, 0.71, 0.705, 0.712]):
        core.record_evaluation(model, version, accuracy, 1.0)
        clock.advance(5)
        assert health(core).state == OK  # rising, then flat within noise
    for version, accuracy in [(7, 0.64), (8, 0.60)]:  # a bad wrapper setting: accuracy falls
        core.record_evaluation(model, version, accuracy, 1.0)
        clock.advance(5)
    result = health(core)
    assert result.codes() == {"accuracy_falling"} and "71.2% to 62.0%" in result.reasons[0].message
    core.close()


class HungStore(MemoryStore):
    """Commits wait until ``free`` is set: a database that hangs."""

    def __init__(self) -> None:
        super().__init__()
        self.free = threading.Event()
        self.free.set()

    def commit(self, events) -> None:
        assert self.free.wait(30)
        super().commit(events)


def test_a_hung_journal_turns_degraded_within_30_s_and_recovers():
    clock, store = Clock(), HungStore()
    core = make_core(clock, store)
    device = core.enroll("Pixel")[0]
    push(core, device)
    store.free.clear()
    grant(core, device)  # queued; the writer takes it and hangs in the commit
    deadline = time.monotonic() + 5
    while core.journal.backlog()[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert core.health().state == OK  # written this instant
    clock.advance(10)
    result = core.health()
    assert result.codes() == {"journal_behind"} and "waited 10 s" in result.reasons[0].message
    store.free.set()
    while core.journal.backlog()[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert core.health().state == OK
    core.close()


class DownStore(MemoryStore):
    """While ``down``, every commit and ping raises StorageUnavailable."""

    down = False

    def commit(self, events) -> None:
        if self.down:
            raise StorageUnavailable("connection refused")
        super().commit(events)

    def ping(self) -> None:
        if self.down:
            raise StorageUnavailable("connection refused")


def test_storage_unavailable_is_down_at_once_and_ok_once_back():
    clock, store = Clock(), DownStore()
    core = make_core(clock, store)
    device = core.enroll("Pixel")[0]
    push(core, device)
    assert core.health().state == OK
    store.down = True
    result = core.health()  # found by the health check's own ping, before any write failed
    assert result.state == DOWN and result.codes() == {"storage_unavailable"}
    assert "connection refused" in result.reasons[0].message
    with pytest.raises(StorageUnavailable):
        push(core, device)  # a commit fails: the coordinator refuses work until it has reloaded
    assert core.degraded is not None and core.health().codes() >= {"storage_unavailable"}
    store.down = False
    deadline = time.monotonic() + 10
    while core.degraded is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert core.health().state == OK
    core.close()


def test_the_settings_give_the_core_its_thresholds_and_refuse_nonsense():
    from pydantic import ValidationError

    from server.settings import Settings

    assert Settings(_env_file=None).health_policy() == HealthPolicy()  # the same defaults on both sides
    tuned = Settings(_env_file=None, health_no_push_seconds=600, health_accuracy_window=10)
    assert tuned.health_policy().no_push_seconds == 600 and tuned.health_policy().accuracy_window == 10
    for bad in ({"health_failing_share": 1.0}, {"health_accuracy_window": 2}, {"health_no_push_seconds": 0}):
        with pytest.raises(ValidationError):
            Settings(_env_file=None, **bad)
