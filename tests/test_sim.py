"""The simulator: event order, the staleness controller's distribution, determinism per seed."""

from __future__ import annotations

import numpy as np
import pytest

from models.manifest import builtin
from server.core.types import Device, TaskRequest
from server.strategies import make_strategy
from sim.controlled import RunConfig, Workbench, run_controlled
from sim.data import load_mnist, partition_sorted_shards
from sim.events import EventQueue
from sim.harness import VirtualClock, build_core
from sim.staleness import D1, D2, StalenessController


@pytest.fixture(scope="module")
def bench() -> Workbench:
    train, test = load_mnist(seed=0)
    return Workbench(builtin("mnist_cnn"), train, test)


def test_event_queue_pops_in_time_then_scheduling_order():
    queue = EventQueue()
    for at, name in ((2.0, "b"), (1.0, "a"), (2.0, "c")):
        queue.schedule(at, name)
    assert [queue.pop() for _ in range(3)] == ["a", "b", "c"] and queue() == 2.0
    with pytest.raises(ValueError):
        queue.schedule(1.0, "past")


@pytest.mark.parametrize(("dist", "mean", "std"), [(D1, 6.0, 2.0), (D2, 12.0, 4.0)])
def test_staleness_controller_draws_the_clipped_gaussian(dist, mean, std):
    controller = StalenessController(dist, np.random.default_rng(0))
    request = TaskRequest(Device("d", "m"), {}, np.ones(10))
    taus = np.array([1000 - controller(request, 1000) for _ in range(20_000)])
    assert taus.min() >= 0 and taus.max() <= 60
    assert taus.mean() == pytest.approx(mean, abs=0.1) and taus.std() == pytest.approx(std, abs=0.15)


def test_long_tail_gives_label_holders_the_fixed_staleness():
    controller = StalenessController(D1, np.random.default_rng(0), long_tail=(0, 48))
    holder = TaskRequest(Device("d", "m"), {}, np.array([3, 0, 0, 0, 0, 0, 0, 0, 0, 1]))
    other = TaskRequest(Device("e", "m"), {}, np.array([0, 4, 0, 0, 0, 0, 0, 0, 0, 1]))
    assert 100 - controller(holder, 100) == 48
    assert all(100 - controller(other, 100) <= 20 for _ in range(100))


def test_version_policy_hands_out_older_versions_and_staleness_follows(bench):
    clock = VirtualClock()
    core = build_core(
        bench.bundle,
        lambda: make_strategy("dynsgd", learning_rate=0.01),
        clock=clock,
        version_policy=lambda request, current: current - 3,
    )
    device, _ = core.enroll("sim")
    n = core.run.manifest.num_params
    from server.core.types import TaskResult

    outcomes = []
    for step in range(6):
        grant = core.request_task(TaskRequest(device, {}, np.ones(10)))
        assert grant.version == max(0, step - 3)
        body = TaskResult(np.ones(10), 1.0, 1.0, None, 10, np.full(n, 1e-3, np.float32), grant.task_id)
        outcomes.append(core.submit(device, grant.task_id, body))
    assert [o.staleness for o in outcomes] == [0, 1, 2, 3, 3, 3]
    assert outcomes[-1].weight == pytest.approx(0.25)


def test_controlled_run_is_deterministic_per_seed(bench):
    parts = partition_sorted_shards(bench.train.y, 100, np.random.default_rng(1))

    def once(seed: int):
        config = RunConfig(lambda: make_strategy("adasgd", learning_rate=0.1), parts, seed, D2, cap=40)
        result = run_controlled(bench, config)
        return result.accuracy, result.staleness, result.weights

    first, again, other = once(3), once(3), once(4)
    assert first == again
    assert first[1] != other[1]


def test_dp_run_pushes_the_expected_batch_and_the_part_label_mix(bench, monkeypatch):
    from sim import controlled
    from sim.controlled import DPSetting

    parts = partition_sorted_shards(bench.train.y, 100, np.random.default_rng(1))
    pushed = []
    submit = controlled.Coordinator.submit

    def spy(self, device, task_id, body):
        pushed.append(body)
        return submit(self, device, task_id, body)

    monkeypatch.setattr(controlled.Coordinator, "submit", spy)

    def once(seed: int):
        config = RunConfig(
            lambda: make_strategy("dynsgd", learning_rate=0.1),
            parts,
            seed,
            D2,
            cap=20,
            dp=DPSetting(1.0, 1.0),
        )
        return run_controlled(bench, config)

    first = once(3)
    # B = min(100 granted, 40 local) and the part's own label mix, never the Poisson sample's
    assert {b.batch_size for b in pushed} == {40} and all(b.label_counts.sum() == 40 for b in pushed)
    assert sum(first.device_tasks.values()) == first.gradients == len(pushed)
    pushed.clear()
    assert once(3).accuracy == first.accuracy  # seeded sampling and noise: a simulation is reproducible
    assert "dp_gradients" in vars(bench)  # built on first use only


def test_plain_run_does_not_build_the_dp_session():
    train, test = load_mnist(seed=0)
    fresh = Workbench(builtin("mnist_cnn"), train, test)
    parts = partition_sorted_shards(fresh.train.y, 100, np.random.default_rng(1))
    run_controlled(fresh, RunConfig(lambda: make_strategy("dynsgd", learning_rate=0.1), parts, 1, D2, cap=5))
    assert "dp_gradients" not in vars(fresh)
