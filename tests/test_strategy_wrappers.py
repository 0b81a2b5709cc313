"""Server optimizers (FedAdam, FedYogi), the ClipNorm and WarmUp wrappers, AdaBuff: by hand, and persisted."""

from __future__ import annotations

import numpy as np
import pytest

from server.store.codec import decode_state, encode_state
from server.strategies import Arrival, FedBuff, make_strategy
from server.strategies.adabuff import AdaBuff
from server.strategies.fedadam import FedAdam, FedYogi
from server.strategies.wrappers import ClipNorm, WarmUp


def arrival(gradient, tau: int = 0, task: str = "t") -> Arrival:
    return Arrival(task, "d", 0, tau, np.asarray(gradient, np.float32), np.array([1, 1]), 2, 1.0, 0.0)


def test_fedadam_matches_reddi_et_al_by_hand():
    strategy = FedAdam(learning_rate=0.1, k=1, beta1=0.9, beta2=0.99, epsilon=1e-3)
    strategy.receive(arrival([1.0, -2.0]))
    params = strategy.aggregate(np.zeros(2, np.float32))
    m = 0.1 * np.array([1.0, -2.0])
    v = 0.99 * 1e-6 + 0.01 * np.array([1.0, 4.0])
    np.testing.assert_allclose(params, -0.1 * m / (np.sqrt(v) + 1e-3), rtol=1e-5)


def test_fedyogi_second_moment_moves_additively():
    strategy = FedYogi(learning_rate=0.1, k=1, beta2=0.99, epsilon=1e-3)
    strategy.receive(arrival([1.0, -2.0]))
    strategy.aggregate(np.zeros(2, np.float32))
    np.testing.assert_allclose(strategy.v, 1e-6 + 0.01 * np.array([1.0, 4.0]), rtol=1e-5)
    strategy.receive(arrival([0.0, 0.0]))  # g² < v: v shrinks by (1−β2)·g² = 0, it does not decay
    strategy.aggregate(np.zeros(2, np.float32))
    np.testing.assert_allclose(strategy.v, 1e-6 + 0.01 * np.array([1.0, 4.0]), rtol=1e-5)


def test_adaptive_step_does_not_grow_with_the_gradient_scale():
    small, large = FedAdam(learning_rate=0.1, k=1), FedAdam(learning_rate=0.1, k=1)
    small.receive(arrival([5.0, 5.0]))
    large.receive(arrival([500.0, 500.0]))
    step_small = -small.aggregate(np.zeros(2, np.float32))
    step_large = -large.aggregate(np.zeros(2, np.float32))
    np.testing.assert_allclose(step_small, step_large, rtol=0.01)


def test_clipnorm_scales_outliers_to_the_median_norm():
    strategy = ClipNorm(FedBuff(learning_rate=1.0, k=3), factor=1.0, bootstrap=2)
    strategy.receive(arrival([3.0, 4.0], task="a"))  # norm 5, history only
    strategy.receive(arrival([0.0, 1.0], task="b"))  # norm 1, history only
    strategy.receive(arrival([30.0, 40.0], task="c"))  # median(5, 1) = 3 → scaled to norm 3
    assert strategy.clipped == 1
    params = strategy.aggregate(np.zeros(2, np.float32))
    expected = -(np.array([3, 4]) + np.array([0, 1]) + np.array([1.8, 2.4])) / 3
    np.testing.assert_allclose(params, expected, rtol=1e-5)


def test_warmup_ramps_the_rate_over_gradients_then_leaves_it():
    strategy = WarmUp(FedBuff(learning_rate=1.0, k=1), gradients=4)
    steps = []
    for _ in range(6):
        strategy.receive(arrival([1.0]))
        steps.append(-float(strategy.aggregate(np.zeros(1, np.float32))[0]))
    assert steps == pytest.approx([0.5, 0.75, 1.0, 1.0, 1.0, 1.0])
    assert strategy.learning_rate == 1.0  # the configured rate is untouched


def test_wrapped_state_round_trips_through_storage():
    strategy = WarmUp(ClipNorm(FedAdam(learning_rate=0.1, k=2), bootstrap=1), gradients=10)
    for g in ([1.0, 2.0], [2.0, 1.0], [4.0, 4.0]):
        strategy.receive(arrival(g))
        if strategy.ready(0.0):
            strategy.aggregate(np.zeros(2, np.float32))
    restored = WarmUp(ClipNorm(FedAdam(learning_rate=0.1, k=2), bootstrap=1), gradients=10)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert restored.seen == 3 and list(restored.inner.norms) == list(strategy.inner.norms)
    np.testing.assert_array_equal(restored.inner.inner.m, strategy.inner.inner.m)
    assert len(restored.buffer) == 1
    a = strategy.aggregate(np.ones(2, np.float32))
    b = restored.aggregate(np.ones(2, np.float32))
    np.testing.assert_allclose(a, b)


def test_adabuff_averages_adasgd_weights_over_k():
    strategy = AdaBuff(learning_rate=1.0, k=2, bootstrap=1000, boost_scope="none")
    strategy.receive(arrival([1.0], tau=0))
    strategy.receive(arrival([1.0], tau=1))
    assert strategy.ready(0.0)
    assert -strategy.aggregate(np.zeros(1, np.float32))[0] == pytest.approx((1 + 0.5) / 2)


def test_unset_rate_and_k_leave_each_strategy_its_own_defaults():
    from server.compose import strategy_params
    from server.settings import Settings

    for name in ("fedbuff", "dynsgd", "fedadam"):
        params = strategy_params(Settings(strategy=name))
        assert "learning_rate" not in params and "k" not in params
        built = make_strategy(name, **params)
        default = type(built)()
        assert (built.learning_rate, built.k) == (default.learning_rate, default.k)
    assert strategy_params(Settings(strategy="fedbuff", learning_rate=0.3, k=4))["k"] == 4


def test_the_default_configuration_is_fedbuff_equal_at_its_own_rate():
    from server.compose import strategy_params
    from server.settings import Settings
    from server.strategies import FedBuffEqual

    settings = Settings(_env_file=None)
    strategy = make_strategy(settings.strategy, **strategy_params(settings))
    assert isinstance(strategy, FedBuffEqual)
    assert strategy.learning_rate == FedBuffEqual().learning_rate == 0.3 and strategy.k == 5
    assert strategy.describe()["strategy"] == "fedbuff-equal"
    # one device, so equal shares weigh 1; five normal gradients fill the median, a 10x one is cut to 2x it
    for i in range(5):
        strategy.receive(arrival([1.0, 0.0], task=str(i)))
    strategy.aggregate(np.zeros(2, np.float32))
    for i in range(4):
        strategy.receive(arrival([1.0, 0.0], task=f"b{i}"))
    strategy.receive(arrival([10.0, 0.0], task="big"))
    step = -strategy.aggregate(np.zeros(2, np.float32))
    dampening = 1.0  # every arrival at staleness 0
    assert step[0] == pytest.approx(0.3 * (10 + 1) / 200 * dampening * (4 + 2) / 5, rel=1e-5)


def test_clipnorm_until_clips_only_the_first_gradients():
    strategy = ClipNorm(FedBuff(learning_rate=1.0, k=1), factor=1.0, bootstrap=1, until=2)
    strategy.receive(arrival([1.0]))
    strategy.aggregate(np.zeros(1, np.float32))
    strategy.receive(arrival([5.0]))  # the second: clipped to the median, 1
    assert -strategy.aggregate(np.zeros(1, np.float32))[0] == pytest.approx(1.0)
    strategy.receive(arrival([5.0]))  # the third: past ``until``, left alone
    assert -strategy.aggregate(np.zeros(1, np.float32))[0] == pytest.approx(5.0)
    assert strategy.clipped == 1
    restored = ClipNorm(FedBuff(learning_rate=1.0, k=1), factor=1.0, bootstrap=1, until=2)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert restored.seen == 3


def lossy(loss: float, task: str = "t") -> Arrival:
    return Arrival(task, "d", 0, 0, np.ones(2, np.float32), np.array([1, 1]), 2, loss, 0.0)


def test_loss_guard_leaves_a_steady_or_falling_loss_alone():
    from server.strategies.guard import LossGuard

    guard = LossGuard(FedBuff(learning_rate=1.0, k=1), warmup=10, span=5)
    for i in range(300):
        guard.receive(lossy(2.0 - i / 200 + 0.05 * (-1) ** i))
        step = -guard.aggregate(np.zeros(2, np.float32))
    assert guard.scale == 1.0 and guard.halvings == 0
    np.testing.assert_allclose(step, [1.0, 1.0])


def test_loss_guard_halves_the_rate_when_the_loss_climbs_once_per_cooldown_down_to_its_floor():
    from server.strategies.guard import LossGuard

    guard = LossGuard(FedBuff(learning_rate=1.0, k=1), warmup=10, span=5, cooldown=20, floor=0.25)
    for _ in range(50):
        guard.receive(lossy(1.0))
        guard.aggregate(np.zeros(2, np.float32))
    guard.receive(lossy(10.0))  # the average jumps past 1.5x its low: halved at once
    assert guard.scale == 0.5 and guard.halvings == 1
    np.testing.assert_allclose(-guard.aggregate(np.zeros(2, np.float32)), [0.5, 0.5])
    for _ in range(19):  # still climbing, but within the cooldown
        guard.receive(lossy(100.0))
    assert guard.scale == 0.5
    for _ in range(200):  # climbing on: halved again after the cooldown, never below the floor
        guard.receive(lossy(1e4))
    assert guard.scale == 0.25 and guard.halvings == 2
    assert guard.inner.learning_rate == 1.0  # the rate itself is untouched between steps


def test_loss_guard_state_survives_a_restart_and_ignores_non_finite_losses():
    from server.strategies.guard import LossGuard

    guard = LossGuard(FedBuff(learning_rate=1.0, k=1), warmup=1, span=3)
    for loss in (1.0, 1.0, float("nan"), 5.0):
        guard.receive(lossy(loss))
    restored = LossGuard(FedBuff(learning_rate=1.0, k=1), warmup=1, span=3)
    restored.load_state_dict(decode_state(encode_state(guard.state_dict())))
    assert (restored.scale, restored.halvings, restored.seen) == (guard.scale, guard.halvings, 4)
    assert restored.loss_average == pytest.approx(guard.loss_average)
    assert guard.describe()["rate_scale"] == guard.scale
