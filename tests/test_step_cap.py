"""The cap on the server's step relative to the parameters (``Strategy.max_step``): a long step is shortened
to ρ‖θ‖ in its own direction, a short one is untouched, and a bundled model's manifest sets it for the default
strategy unless the settings set one (issue 28's fifth search)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pydantic import ValidationError

from fleet_protocol import Manifest
from models.manifest import builtin
from server.compose import build_coordinator
from server.strategies import Arrival, StrategySettings, make_strategy, wrap
from server.strategies.guard import LossGuardSettings
from tests.conftest import settings_for


def stepped(strategy, params: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    for i in range(strategy.k):
        arrival = Arrival(f"t{i}", "d", 0, 0, gradient, np.ones(10), batch_size=10, loss=1.0, received_at=0.0)
        strategy.receive(arrival)
    return strategy.aggregate(params)


@pytest.mark.parametrize("name", ["fedbuff", "dynsgd", "vandijk", "wkafl"])
def test_a_long_step_is_shortened_to_its_cap_in_its_own_direction(name):
    params, gradient = np.full(4, 1.0, np.float32), np.array([3.0, -4.0, 0.0, 0.0], np.float32)
    free = stepped(make_strategy(name, learning_rate=1.0), params, gradient) - params
    capped_strategy = make_strategy(name, learning_rate=1.0, max_step=0.1)
    capped = stepped(capped_strategy, params, gradient) - params
    limit = 0.1 * np.linalg.norm(params)
    assert np.linalg.norm(free) > limit  # the cap binds here
    assert np.linalg.norm(capped) == pytest.approx(limit, rel=1e-5)
    cosine = np.dot(capped, free) / (np.linalg.norm(capped) * np.linalg.norm(free))
    assert cosine == pytest.approx(1, abs=1e-6)
    assert capped_strategy.describe()["steps_capped"] == 1


def test_a_short_step_and_parameters_at_zero_are_left_alone():
    strategy = make_strategy("fedbuff", learning_rate=1e-3, max_step=0.1)
    params, gradient = np.full(4, 1.0, np.float32), np.ones(4, np.float32)
    assert np.array_equal(stepped(strategy, params, gradient), params - np.float32(1e-3) * gradient)
    zero = np.zeros(4, np.float32)  # a model that starts at zero must still move
    assert np.linalg.norm(stepped(strategy, zero, gradient)) > 0 and strategy.steps_capped == 0


def test_wrappers_pass_the_cap_to_the_strategy_they_wrap():
    strategy = wrap(make_strategy("fedbuff-equal", learning_rate=1.0), [LossGuardSettings()])
    assert strategy.max_step is None
    strategy.max_step = 0.05  # what the coordinator sets from a manifest
    assert strategy.inner.max_step == 0.05 and strategy.describe()["max_step"] == 0.05
    with pytest.raises(ValidationError):
        StrategySettings(name="fedbuff", max_step=0)


def bundle_capped(cap: float | None):
    bundle = builtin("mlp")
    return dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest, max_step=cap))


@pytest.mark.parametrize(("configured", "expected"), [(None, 0.02), (0.5, 0.5)])
def test_the_default_takes_the_models_cap_unless_the_settings_set_one(tmp_path, configured, expected):
    strategy = {"name": "fedbuff-equal"} | ({"max_step": configured} if configured else {})
    coordinator = build_coordinator(settings_for(tmp_path, strategy=strategy, initial_model=None))
    coordinator.add_model(bundle_capped(0.02))
    assert coordinator.run is not None and coordinator.run.strategy.max_step == pytest.approx(expected)
    coordinator.close()


def test_another_strategy_takes_no_cap_from_the_model_and_the_default_at_a_set_rate_keeps_it(tmp_path):
    # the cap was chosen with the default strategy and is what holds a rate set too high (the search's rate
    # curves run capped), so a set rate keeps it; the rate itself is then the settings'
    for strategy, cap, rate in (
        ({"name": "dynsgd"}, None, 0.2),
        ({"name": "fedbuff-equal", "learning_rate": 2.4}, 0.02, 2.4),
    ):
        coordinator = build_coordinator(settings_for(tmp_path, strategy=strategy, initial_model=None))
        coordinator.add_model(bundle_capped(0.02))
        assert coordinator.run is not None and coordinator.run.strategy.max_step == cap
        assert coordinator.run.strategy.learning_rate == pytest.approx(rate)
        coordinator.close()


def test_with_dp_on_the_default_takes_no_cap_from_the_model():
    from server.compose import at_model_cap
    from server.settings import Settings

    assert at_model_cap(Settings(_env_file=None)) and not at_model_cap(Settings(_env_file=None, dp=True))


def test_a_manifest_cap_is_carried_and_checked():
    manifest = bundle_capped(0.04).manifest
    assert Manifest.from_json(manifest.to_json()).max_step == 0.04
    assert Manifest.from_json(builtin("logreg").manifest.to_json()).max_step is None
    for bad in (0.0, -1.0, float("nan"), 11.0):
        with pytest.raises(ValueError, match="max_step"):
            dataclasses.replace(manifest, max_step=bad).validate()


def test_past_its_reference_staleness_the_cap_shrinks_as_one_over_the_staleness():
    from server.strategies.fairness import ConcurrencyScale
    from server.strategies.fedbuff import FedBuff

    params, gradient = np.full(4, 1.0, np.float32), np.array([3.0, -4.0, 0.0, 0.0], np.float32)

    def step(staleness: int, cap_reference: float | None) -> float:
        strategy = ConcurrencyScale(
            FedBuff(learning_rate=1.0, k=1), reference=1e6, cap_reference=cap_reference
        )
        strategy.max_step = 0.1
        arrival = Arrival("t", "d", 0, staleness, gradient, np.ones(10), 10, 1.0, received_at=0.0)
        strategy.receive(arrival)
        new = strategy.aggregate(params)
        assert strategy.max_step == 0.1  # the configured cap is kept; only this update's is shrunk
        return float(np.linalg.norm(new - params) / np.linalg.norm(params))

    assert step(2, 4.0) == pytest.approx(0.1, rel=1e-5)  # under the reference: the cap as set
    assert step(16, 4.0) == pytest.approx(0.1 * 4 / 16, rel=1e-5)  # drift over 16 stale updates ≤ 4 caps
    assert step(16, None) == pytest.approx(0.1, rel=1e-5)  # no reference: fixed
    assert make_strategy("fedbuff-equal", cap_reference=4.0).describe()["concurrency_factor"] == 1.0
