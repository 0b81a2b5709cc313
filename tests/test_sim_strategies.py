"""SSGD and FedBuff against hand-computed values; the coordinator's version policy and wait hook."""

from __future__ import annotations

import math

import numpy as np
import pytest

from server.strategies import SSGD, Arrival, FedBuff, make_strategy
from server.strategies.dampening import sqrt_dampening


def arrival(tau: int, gradient, *, base: int = 0, at: float = 0.0, device: str = "d") -> Arrival:
    counts = np.array([1, 1])
    return Arrival("t", device, base, tau, np.asarray(gradient, np.float32), counts, 2, 1.0, at)


def test_fedbuff_weighs_by_inverse_sqrt_and_steps_by_the_mean():
    assert sqrt_dampening(3) == pytest.approx(0.5)
    strategy = FedBuff(learning_rate=0.1, k=2)
    assert strategy.receive(arrival(0, [1.0, 0.0])) == 1.0
    assert not strategy.ready(0.0)
    assert strategy.receive(arrival(3, [0.0, 2.0])) == pytest.approx(0.5)
    assert strategy.ready(0.0)
    new = strategy.aggregate(np.zeros(2, np.float32))
    # θ − 0.1 · (1·[1, 0] + 0.5·[0, 2]) / 2 = [−0.05, −0.05]
    np.testing.assert_allclose(new, [-0.05, -0.05], rtol=1e-6)


def test_fedbuff_time_window_fires_before_k():
    strategy = FedBuff(learning_rate=1.0, k=10, time_window=5.0)
    strategy.receive(arrival(0, [1.0], at=1.0))
    assert not strategy.ready(5.9) and strategy.ready(6.0)


def test_ssgd_round_barrier_quota_and_stale_drop():
    strategy = SSGD(learning_rate=0.5, k=2)
    assert strategy.admit(device_id="a", version=0, now=0.0) is None
    assert strategy.admit(device_id="a", version=0, now=0.0) == "already_selected"
    assert strategy.admit(device_id="b", version=0, now=0.0) is None
    assert strategy.admit(device_id="c", version=0, now=0.0) == "round_full"
    strategy.receive(arrival(0, [2.0, 0.0], device="a"))
    assert not strategy.ready(1.0)
    strategy.receive(arrival(0, [0.0, 4.0], device="b"))
    new = strategy.aggregate(np.zeros(2, np.float32))
    np.testing.assert_allclose(new, [-0.5, -1.0])  # θ − 0.5 · mean
    # a new round starts on the next version; a gradient from the old one is dropped
    assert strategy.admit(device_id="c", version=1, now=2.0) is None
    assert strategy.receive(arrival(1, [9.0, 9.0], base=0)) == 0.0 and not strategy.buffer
    assert strategy.dropped == 1


def test_ssgd_over_selection_and_deadline_drop_late_devices():
    strategy = SSGD(learning_rate=1.0, k=2, over_selection=1.3, time_window=4.0)
    assert strategy.quota == 3
    for device in "abc":
        assert strategy.admit(device_id=device, version=0, now=10.0) is None
    strategy.receive(arrival(0, [1.0], at=11.0, device="a"))
    assert not strategy.ready(11.0)
    assert strategy.receive(arrival(0, [5.0], at=14.5, device="b")) == 0.0  # past the deadline: dropped
    assert strategy.ready(14.5)
    np.testing.assert_allclose(strategy.aggregate(np.zeros(1, np.float32)), [-1.0])


def test_ssgd_state_round_trips():
    strategy = make_strategy("ssgd", learning_rate=0.1, k=3, over_selection=1.3)
    strategy.admit(device_id="a", version=4, now=1.0)
    strategy.receive(arrival(0, [1.0], base=4, device="a"))
    again = make_strategy("ssgd", learning_rate=0.1, k=3, over_selection=1.3)
    again.load_state_dict(strategy.state_dict())
    assert (again.round_version, again.selected, len(again.buffer)) == (4, {"a"}, 1)
    assert repr(again).startswith("SSGD(") and math.isclose(again.over_selection, 1.3)
