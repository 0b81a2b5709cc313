"""A bundled model's own rate (its manifest's ``learning_rate``): the default strategy steps at it when
the settings leave the rate unset; an operator's rate, or another strategy, keeps its own (issue 28)."""

from __future__ import annotations

import dataclasses

import pytest

from fleet_protocol import Manifest
from models.manifest import builtin
from server.compose import apply_settings, build_coordinator
from tests.conftest import settings_for


def bundle_at(rate: float | None):
    bundle = builtin("logreg")
    return dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest, learning_rate=rate))


@pytest.mark.parametrize(("configured", "expected"), [(None, 0.7), (0.05, 0.05)])
def test_the_strategy_steps_at_the_models_rate_unless_one_is_set(tmp_path, configured, expected):
    strategy = {"name": "fedbuff-equal"} | ({"learning_rate": configured} if configured else {})
    settings = settings_for(tmp_path, strategy=strategy, initial_model=None)
    coordinator = build_coordinator(settings)
    coordinator.add_model(bundle_at(0.7))  # trained at once: the first model
    assert coordinator.run is not None
    assert coordinator.run.strategy.learning_rate == pytest.approx(expected)
    # a live change of the strategy's settings keeps to the same rule, so does a model with no rate
    other = settings_for(tmp_path, strategy={"name": "fedbuff-equal", "k": 3}, initial_model=None)
    apply_settings(coordinator, settings, other)
    assert coordinator.run.strategy.learning_rate == pytest.approx(0.7)
    coordinator.add_model(bundle_at(None))
    assert coordinator.run.strategy.learning_rate == pytest.approx(0.3)  # fedbuff-equal's own
    coordinator.close()


def test_another_strategy_keeps_its_own_rate(tmp_path):
    coordinator = build_coordinator(settings_for(tmp_path, strategy={"name": "dynsgd"}, initial_model=None))
    coordinator.add_model(bundle_at(0.7))
    assert coordinator.run.strategy.learning_rate != pytest.approx(0.7)
    coordinator.close()


def test_a_manifest_rate_is_carried_and_checked():
    manifest = bundle_at(0.4).manifest
    assert Manifest.from_json(manifest.to_json()).learning_rate == 0.4
    assert (
        Manifest.from_json(builtin("logreg").manifest.to_json()).learning_rate
        == builtin("logreg").manifest.learning_rate
    )
    for bad in (0.0, -1.0, float("nan"), 1e9):
        with pytest.raises(ValueError, match="learning_rate"):
            dataclasses.replace(manifest, learning_rate=bad).validate()
