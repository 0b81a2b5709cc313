"""The typed settings: each strategy's and wrapper's own model from the registries, the old flat names
mapped onto them, the generated docs/configuration.md, and a new strategy added by its file and one line."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
from pydantic import ValidationError

from server.compose import build_strategy, strategy_params
from server.settings import LIVE_SETTINGS, SECTIONS, Settings, with_overrides
from server.settings_docs import OUTPUT, render
from server.strategies import (
    STRATEGIES,
    WRAPPERS,
    Arrival,
    ClipNorm,
    ConcurrencyScale,
    FedBuffEqual,
    Kardam,
    LossGuard,
    WarmUp,
    make_strategy,
)
from server.strategies.fairness import SampleWeight
from server.strategies.serving_average import ServingAverage
from tests.test_no_torch import run_isolated


def settings(**values):
    return Settings(_env_file=None, **values)


def arrival(gradient, task: str, tau: int = 0) -> Arrival:
    return Arrival(task, "d", 0, tau, np.asarray(gradient, np.float32), np.array([1, 1]), 2, 1.0, 0.0)


def test_docs_configuration_md_is_up_to_date():
    assert OUTPUT.read_text() == render(), (
        "docs/configuration.md is stale: run python -m server.settings_docs"
    )


def test_every_setting_has_a_section_and_a_description():
    listed = [name for names in SECTIONS.values() for name in names]
    assert sorted(listed) == sorted(Settings.model_fields)  # each exactly once
    assert all(field.description for field in Settings.model_fields.values())
    for registry in (STRATEGIES, WRAPPERS):
        for cls in registry.values():
            for name, field in cls.settings.model_fields.items():
                assert name == "name" or field.description, (cls.__name__, name)
    assert LIVE_SETTINGS["Learning"] == ("strategy", "wrappers")


def constructor_defaults(cls: type) -> dict[str, object]:
    defaults: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass):
            for name, p in inspect.signature(vars(klass)["__init__"]).parameters.items():
                if p.default is not inspect.Parameter.empty:
                    defaults[name] = p.default
    return defaults


def test_defaults_are_the_strategies_own_and_the_shipped_default_is_unchanged():
    # the old Settings default, kept so results do not move (the constructor's is math.log(10))
    known = {("mapa", "mapa_loss_gap"): 2.302585}
    for registry in (STRATEGIES, WRAPPERS):
        for name, cls in registry.items():
            own = constructor_defaults(cls)
            for key, field in cls.settings.model_fields.items():
                if key == "name" or field.default is None:
                    continue
                assert field.default == known.get((name, key), own[key]), (name, key)
    default = settings()
    assert default.strategy.name == "fedbuff-equal" and default.wrappers == []
    assert strategy_params(default) == {
        "clip_factor": 2.0,
        "warmup_gradients": 200,
        "share_window": 200,
        "concurrency_reference": 5.0,
        "cap_reference": 6.0,
        "concurrency_spread": 1.0,
        "serving_average": 0.9,
        "sample_weight": 0.5,
    }
    built = build_strategy(default)
    assert type(built) is FedBuffEqual and built.learning_rate == 0.3 and built.k == 5
    weighed = built.inner
    assert isinstance(weighed, SampleWeight) and weighed.power == 0.5
    served = weighed.inner
    assert isinstance(served, ServingAverage) and served.decay == 0.9
    crowd = served.inner
    assert isinstance(crowd, ConcurrencyScale) and crowd.reference == 5.0 and crowd.power == 1.0
    assert crowd.cap_reference == 6.0 and crowd.spread == 1.0
    warm_up = crowd.inner
    assert isinstance(warm_up, WarmUp) and warm_up.gradients == 200
    assert isinstance(warm_up.inner, ClipNorm) and warm_up.inner.factor == 2.0 and warm_up.inner.until is None


def test_old_flat_names_still_configure_the_strategy_and_kardam():
    s = settings(
        strategy="adasgd", learning_rate=0.1, percentile=50, clip_factor=3.0, kardam=True, kardam_f=2
    )
    assert s.strategy.name == "adasgd" and s.strategy.percentile == 50 and s.strategy.learning_rate == 0.1
    assert [w.name for w in s.wrappers] == ["kardam"] and s.wrappers[0].f == 2  # clip_factor: not adasgd's
    built = build_strategy(s)
    assert isinstance(built, Kardam) and built.f == 2 and built.inner.percentile == 50
    assert settings(kardam=False, wrappers=["kardam"]).wrappers == []
    assert settings(wrappers=[{"name": "kardam", "f": 1}], kardam_f=4).wrappers[0].f == 1  # structure wins
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        settings(strategy="bogus")
    with pytest.raises(ValidationError, match="percentile"):
        settings(strategy={"name": "fedbuff", "percentile": 50})  # the structure is strict


@pytest.mark.parametrize(
    ("env", "strategy", "wrappers"),
    [
        ({"FLEET_STRATEGY": "adasgd", "FLEET_PERCENTILE": "50", "FLEET_LEARNING_RATE": "0.3"},
         {"name": "adasgd", "percentile": 50.0, "learning_rate": 0.3}, []),
        ({"FLEET_STRATEGY": "adasgd", "FLEET_STRATEGY__PERCENTILE": "40", "FLEET_PERCENTILE": "50"},
         {"name": "adasgd", "percentile": 40.0}, []),
        ({"FLEET_STRATEGY__NAME": "wkafl", "FLEET_STRATEGY__WKAFL_ALPHA": "0.5"},
         {"name": "wkafl", "wkafl_alpha": 0.5}, []),
        ({"FLEET_STRATEGY": '{"name": "ssgd", "over_selection": 1.3}', "FLEET_K": "5"},
         {"name": "ssgd", "over_selection": 1.3, "k": 5}, []),
        ({"FLEET_CLIP_FACTOR": "2", "FLEET_WARMUP_GRADIENTS": "10"},
         {"name": "fedbuff-equal", "clip_factor": 2.0, "warmup_gradients": 10}, []),
        ({"FLEET_KARDAM": "true", "FLEET_KARDAM_F": "2", "FLEET_KARDAM_WARMUP": "drop"},
         {"name": "fedbuff-equal"}, [{"name": "kardam", "f": 2, "warmup": "drop"}]),
        ({"FLEET_WRAPPERS": "clip-norm,loss-guard", "FLEET_KARDAM": "1"},
         {"name": "fedbuff-equal"}, [{"name": "clip-norm"}, {"name": "loss-guard"}, {"name": "kardam"}]),
        ({"FLEET_WRAPPERS": '[{"name": "warm-up", "gradients": 7}]'},
         {"name": "fedbuff-equal"}, [{"name": "warm-up", "gradients": 7}]),
    ],
)  # fmt: skip
def test_environment_variables_map_onto_the_structure(monkeypatch, env, strategy, wrappers):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s = settings()
    for key, value in strategy.items():
        assert getattr(s.strategy, key) == value, key
    assert len(s.wrappers) == len(wrappers)
    for got, want in zip(s.wrappers, wrappers, strict=True):
        assert all(getattr(got, key) == value for key, value in want.items()), got


def test_a_dotenv_file_is_read_like_the_environment(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("FLEET_STRATEGY=fedbuff\nFLEET_K=7\nFLEET_KARDAM=true\n")
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert (s.strategy.name, s.strategy.k, [w.name for w in s.wrappers]) == ("fedbuff", 7, ["kardam"])


def test_wrappers_apply_in_order_the_first_innermost():
    s = settings(
        strategy="fedbuff", wrappers=["clip-norm", {"name": "loss-guard", "spike": 2.0}], kardam=True
    )
    built = build_strategy(s)
    assert isinstance(built, Kardam) and isinstance(built.inner, LossGuard) and built.inner.spike == 2.0
    assert isinstance(built.inner.inner, ClipNorm) and built.inner.inner.inner.name == "fedbuff"
    assert built.describe()["strategy"] == "fedbuff"


def test_dynsgd_clip_is_dynsgd_inside_clip_norm_and_warm_up():
    preset = build_strategy(
        settings(strategy={"name": "dynsgd-clip", "clip_factor": 1.5, "warmup_gradients": 20})
    )
    composed = build_strategy(
        settings(
            strategy={"name": "dynsgd", "learning_rate": 0.5},
            wrappers=[{"name": "clip-norm", "factor": 1.5}, {"name": "warm-up", "gradients": 20}],
        )
    )
    assert isinstance(composed, WarmUp)
    rng = np.random.default_rng(0)
    a = b = np.zeros(4, np.float32)
    for i in range(40):
        g = rng.normal(size=4).astype(np.float32) * (10 if i % 7 == 6 else 1)
        for strategy in (preset, composed):
            strategy.receive(arrival(g, str(i), tau=i % 3))
        a, b = preset.aggregate(a), composed.aggregate(b)
        np.testing.assert_array_equal(a, b)


def test_with_overrides_replaces_the_strategy_and_keeps_old_saved_flat_values_working():
    base = settings(strategy="adasgd", percentile=90)
    assert with_overrides(base, {"learning_rate": 0.125}).strategy.percentile == 90  # an old saved override
    switched = with_overrides(base, {"strategy": "fedbuff", "k": 3, "percentile": 50})
    assert (switched.strategy.name, switched.strategy.k) == ("fedbuff", 3)
    full = with_overrides(base, {"strategy": {"name": "adasgd", "percentile": 80}, "learning_rate": 0.3})
    assert full.strategy.percentile == 80 and full.strategy.learning_rate is None  # a later full save wins
    kept = with_overrides(base, {"wrappers": [{"name": "kardam", "f": 1}]})
    assert kept.wrappers[0].f == 1 and kept.strategy == base.strategy
    with pytest.raises(ValidationError):
        with_overrides(base, {"wrappers": [{"name": "kardam", "f": -1}]})
    with pytest.raises(ValueError, match="not settable"):
        with_overrides(base, {"data_dir": "x"})
    saved = json.loads(json.dumps(full.model_dump(mode="json")["strategy"]))  # what the console stores
    assert with_overrides(base, {"strategy": saved}).strategy == full.strategy


def test_make_strategy_takes_a_name_or_settings():
    s = settings(strategy={"name": "fedbuff", "k": 4})
    assert make_strategy(s.strategy).k == 4 and make_strategy(s.strategy, k=2).k == 2


def test_a_new_strategy_is_its_own_file_and_one_registry_line(tmp_path):
    """A toy strategy in its own module, registered with one line: it is a FLEET_STRATEGY name, takes its
    fields (structured and flat), is built by compose, listed on the console and documented."""
    (tmp_path / "toy_strategy.py").write_text(
        inspect.cleandoc('''
        from typing import Literal

        from pydantic import Field

        from server.strategies.base import Arrival, Strategy, StrategySettings


        class ToySettings(StrategySettings):
            name: Literal["toy"] = "toy"
            toy_gain: float = Field(2.0, gt=0, description="every gradient's weight")


        class Toy(Strategy):
            """Toy: every gradient at one weight."""

            name = "toy"
            settings = ToySettings

            def __init__(self, *, toy_gain: float = 2.0, **common) -> None:
                super().__init__(**common)
                self.toy_gain = toy_gain

            def weigh(self, arrival: Arrival) -> float:
                return self.toy_gain
        ''')
    )
    last = run_isolated(f"""
        import json, os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import server.strategies as registry
        from toy_strategy import Toy
        registry.STRATEGIES[Toy.name] = Toy  # the one registry line
        from server.compose import build_strategy
        from server.console.actions import _submitted
        from server.settings import Settings
        from server.settings_docs import render
        os.environ["FLEET_STRATEGY"], os.environ["FLEET_TOY_GAIN"] = "toy", "3"
        s = Settings(_env_file=None)
        built = build_strategy(s)
        form = {{"strategy": "toy", "strategy.toy_gain": "5"}}
        docs = render()
        print(json.dumps({{
            "gain": built.toy_gain, "type": type(built).__name__,
            "nested": Settings(strategy={{"name": "toy", "toy_gain": 4}}).strategy.toy_gain,
            "console": _submitted(form, Settings(_env_file=None, strategy="fedbuff"))["strategy"],
            "docs": "### `toy`" in docs and "`FLEET_TOY_GAIN`" in docs and "every gradient's weight" in docs,
        }}))
    """)
    result = json.loads(last)
    assert result == {
        "gain": 3.0,
        "type": "Toy",
        "nested": 4.0,
        "console": {
            "name": "toy",
            "learning_rate": None,
            "k": None,
            "time_window": None,
            "max_step": None,
            "toy_gain": "5",
        },
        "docs": True,
    }
