"""Aggregation strategies and the wrappers around them behind one interface; pick them by name.

The two registries below are the single source of the names: server/settings.py's ``strategy`` and
``wrappers``, the console's settings page and docs/configuration.md are all built from them and from each
class's ``settings`` model. Adding a strategy (or a wrapper) is its own file, with a ``settings`` model
whose ``name`` is a ``Literal`` of its name, and one line here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Union

from pydantic import Field

from server.core.ports import ReferenceGradient
from server.strategies.adabuff import AdaBuff
from server.strategies.adasgd import AdaSGD
from server.strategies.audp import AUDP
from server.strategies.base import Arrival, Strategy, StrategySettings, TaskTerms
from server.strategies.centered_clip import CenteredClip
from server.strategies.dynsgd import DynSGD
from server.strategies.dynsgd_clip import DynSGDClip
from server.strategies.dynsgd_equal import DynSGDEqual
from server.strategies.fairness import ConcurrencyScale, EqualShare, FleetStaleness, SampleWeight
from server.strategies.fedadam import FedAdam, FedYogi
from server.strategies.fedavg_async import FedAvgAsync
from server.strategies.fedbuff import FedBuff
from server.strategies.fedbuff_equal import FedBuffEqual
from server.strategies.foolsgold import FoolsGold
from server.strategies.guard import LossGuard
from server.strategies.kardam import Kardam
from server.strategies.label_check import LabelCheck
from server.strategies.mapa import MAPA
from server.strategies.norm_noise import NormNoise
from server.strategies.robust_aggregation import RobustAggregation
from server.strategies.sasgd import SASGD
from server.strategies.serving_average import ServingAverage
from server.strategies.sign_vote import SignVote
from server.strategies.ssgd import SSGD
from server.strategies.trusted_bound import TrustedBound
from server.strategies.trusted_score import TrustedScore
from server.strategies.twafl import TWAFL
from server.strategies.vandijk import VanDijk
from server.strategies.wkafl import WKAFL
from server.strategies.wrappers import ClipNorm, Momentum, StrategyWrapper, WarmUp, WrapperSettings

DEFAULT_STRATEGY = "fedbuff-equal"  # chosen on half of a workload suite (docs/results/default-search.md)

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (AdaBuff, AdaSGD, AUDP, DynSGD, DynSGDClip, FedAdam, FedAvgAsync, FedBuff, FedYogi, MAPA, SSGD)
    + (DynSGDEqual, FedBuffEqual, SASGD, TWAFL, VanDijk, WKAFL)
}

# applied in the order listed in the settings, the first one innermost (server/compose.py wrap_strategy)
WRAPPERS: dict[str, type[StrategyWrapper]] = {
    cls.settings.model_fields["name"].default: cls
    for cls in (Kardam, ClipNorm, WarmUp, LossGuard, EqualShare, FleetStaleness, ConcurrencyScale, Momentum)
    + (ServingAverage, SampleWeight)
    + (CenteredClip, RobustAggregation, TrustedScore, NormNoise, SignVote, LabelCheck)  # issue 30's defences
    + (TrustedBound, FoolsGold)
}

# issue 30's recommended robust configuration, innermost first (FLEET_WRAPPERS entries; trusted-score's data
# is the deployment's): label-check holds each push to the labels it claims (a lie is caught) and drops a
# device whose output rows, over its last ~30 pushes, disagree with the trusted digits' (a backdoor pulls its
# target's row toward other digits), strictly while the model learns and, once it fits its data (the bias
# residual of the lower quartile of the pushes passed under 0.1), weighing a device between −0.2 and −0.5 down
# rather than out (an honest device with digits unlike the trusted ones drifts there, and dropped, would drift
# further), and scoring the rows less against the trusted gradient's and more against the class templates (the
# mean features the output layer reads on each class's trusted digits, centred) as the fleet settles (late in
# training the trusted rows are made of the few trusted digits still wrong, and honest devices drift from
# them); FLTrust weighs a push by the device's standing against the trusted digits of its labels, the output
# layer and the layers under it each scored (no gradient lengthened or weighing over its own); trusted-bound
# clips each coordinate under the output layer to 4x its share of the trusted gradients (a backdoor's patch
# feeds weights the trusted digits barely move, and learnt that slowly its attackers' rows keep disagreeing);
# and FLTrust's label veto gives weight 0 to a device whose pushes, over its last ~30, work against one
# class's trusted digits (their lowest cosine with one label's trusted gradient under −0.5: label-flip's
# pushes pass every other test, their claim being true); FLTrust's weights times 1.25 (capped at a device's
# own, they average under 1 on a clean fleet and shrink every step). `fleet experiment robust --rerun` chose
# it on seeds 1000 and 1004 at 4x the horizon (2026-11-30, at b02e46f); docs/results/robust.md has what it
# holds and what it does not.
RECOMMENDED_DEFENCE: tuple[dict[str, Any], ...] = (
    {"name": "trusted-bound", "layers": "body"},
    {"name": "trusted-score", "test": "fltrust", "scale": "fleet-down", "device_memory": 10,
     "by_labels": "device", "max_weight": 1.0, "parts": "each", "label_veto": 0.5, "gain": 1.25},
    {"name": "label-check", "threshold": 0.0, "memory": 30, "settled": -0.2, "residual": 0.1, "ramp": 0.3,
     "template_every": 20, "template_mix": "settling", "residual_quantile": 0.25},
)  # fmt: skip


def settings_union(registry: dict[str, type[Any]]) -> Any:
    """The registry's ``settings`` models as one pydantic discriminated union on ``name``; checks that
    each model's name is the one it is registered under."""
    models = []
    for name, cls in registry.items():
        declared = cls.settings.model_fields["name"].default
        if declared != name:
            raise TypeError(f"{cls.__name__}.settings is named {declared!r}, registered as {name!r}")
        models.append(cls.settings)
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007 - a runtime tuple


def make_strategy(name: str | StrategySettings, **params: Any) -> Strategy:
    """Build a strategy by its registered name, or from its settings (``params`` override them)."""
    if isinstance(name, StrategySettings):
        name, params = name.name, {**name.kwargs(), **params}
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {sorted(STRATEGIES)}") from None
    max_step = params.pop("max_step", None)  # every strategy's, not a constructor keyword (Strategy.capped)
    strategy = cls(**params)
    strategy.max_step = max_step
    return strategy


def wrap(
    strategy: Strategy, wrappers: Sequence[WrapperSettings], *, reference: ReferenceGradient | None = None
) -> Strategy:
    """``strategy`` inside each configured wrapper, the first one innermost (server/compose.py's order);
    ``reference``, the trusted gradient port, goes to the wrappers that score against it (trusted-score,
    label-check, trusted-bound)."""
    for config in wrappers:
        extra = {"reference": reference} if getattr(WRAPPERS[config.name], "uses_reference", False) else {}
        strategy = WRAPPERS[config.name](strategy, **config.kwargs(), **extra)
    return strategy


def layers(strategy: Strategy) -> Iterator[tuple[str, Strategy]]:
    """Each wrapper of ``strategy``, outermost first, then the strategy it wraps, with how to name it
    ("wrapper loss-guard", "strategy adasgd"; a named composition such as dynsgd-clip is a strategy)."""
    while True:
        settings = type(strategy).settings
        if isinstance(strategy, StrategyWrapper) and issubclass(settings, WrapperSettings):
            yield f"wrapper {settings.model_fields['name'].default}", strategy
        else:
            yield f"strategy {strategy.name}", strategy
        if not isinstance(strategy, StrategyWrapper):
            return
        strategy = strategy.inner


def dp_refusal(strategy: Strategy, *, similarity_drop: float = 0.0) -> str | None:
    """Why ``strategy`` (wrappers included) cannot run with DP on, or None: it uses the 'paper' norm-Laplace
    sampler (not ε-DP), it reads a field a DP device does not send (``Strategy.reads``: the loss, the label
    counts), or the controller's admission by similarity (``similarity_drop``) would read the label counts."""
    paper = [name for name, layer in layers(strategy) if getattr(layer, "sampler", None) == "paper"]
    if paper:  # issue 27, finding 6: its noise does not give the ε it is charged
        return (
            f"DP is on, but {paper[0]} uses the 'paper' noise sampler, which is not ε-DP: set"
            " dp_noise_sampler to 'exact', or turn DP off to reproduce the paper's curves"
        )
    problems = [
        f"{name} reads {field}" for name, layer in layers(strategy) for field in sorted(layer.reads())
    ]
    if similarity_drop > 0:
        problems.append("admission by similarity (similarity_drop > 0) reads label_counts")
    if not problems:
        return None
    return (
        "DP is on, but " + "; ".join(problems) + ": a DP device sends no loss and no label counts (they are"
        " not noised). Choose a strategy and wrappers that do not need them (adasgd: boost_scope none;"
        " wkafl: wkafl_loss_threshold 0), or turn DP off"
    )


def default_strategy(model: str | None = None) -> tuple[str, float]:
    """Fleet's default strategy and its rate: what a deployment that sets nothing runs (the declared
    default, not the environment's FLEET_STRATEGY), on the bundled ``model`` at its own rate if it has one
    (its manifest's ``learning_rate``: server/compose.py ``at_model_rate``)."""
    rate = float(make_strategy(DEFAULT_STRATEGY).learning_rate)
    if model is not None:
        from models.manifest import builtin  # the bundled models' manifests; the core knows no files

        own = builtin(model).manifest.learning_rate
        rate = rate if own is None else float(own)
    return DEFAULT_STRATEGY, rate


def default_max_step(model: str | None = None) -> float | None:
    """The default strategy's step cap on the bundled ``model`` (its manifest's ``max_step``): what a
    deployment of the default strategy that sets no cap runs, at any rate (``Strategy.max_step``;
    server/compose.py ``at_model_cap``); None: uncapped."""
    if model is None:
        return None
    from models.manifest import builtin

    return builtin(model).manifest.max_step


__all__ = [
    "AdaBuff",
    "AdaSGD",
    "Arrival",
    "AUDP",
    "CenteredClip",
    "RECOMMENDED_DEFENCE",
    "SignVote",
    "ClipNorm",
    "ConcurrencyScale",
    "DEFAULT_STRATEGY",
    "DynSGD",
    "DynSGDClip",
    "DynSGDEqual",
    "EqualShare",
    "FedAdam",
    "FedAvgAsync",
    "FedBuff",
    "FedBuffEqual",
    "FleetStaleness",
    "FedYogi",
    "Kardam",
    "LossGuard",
    "MAPA",
    "Momentum",
    "NormNoise",
    "RobustAggregation",
    "SASGD",
    "SSGD",
    "STRATEGIES",
    "default_max_step",
    "default_strategy",
    "dp_refusal",
    "layers",
    "settings_union",
    "Strategy",
    "StrategySettings",
    "StrategyWrapper",
    "TaskTerms",
    "TrustedScore",
    "TWAFL",
    "VanDijk",
    "WarmUp",
    "WKAFL",
    "WRAPPERS",
    "WrapperSettings",
    "make_strategy",
    "wrap",
]
