"""Aggregation strategies behind one interface; pick one by name."""

from __future__ import annotations

from typing import Any

from server.strategies.adabuff import AdaBuff
from server.strategies.adasgd import AdaSGD
from server.strategies.audp import AUDP
from server.strategies.base import Arrival, Strategy, StrategySettings, TaskTerms
from server.strategies.dynsgd import DynSGD
from server.strategies.dynsgd_clip import DynSGDClip
from server.strategies.fedadam import FedAdam, FedYogi
from server.strategies.fedavg_async import FedAvgAsync
from server.strategies.fedbuff import FedBuff
from server.strategies.mapa import MAPA
from server.strategies.sasgd import SASGD
from server.strategies.ssgd import SSGD
from server.strategies.twafl import TWAFL
from server.strategies.vandijk import VanDijk
from server.strategies.wkafl import WKAFL

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (AdaBuff, AdaSGD, AUDP, DynSGD, DynSGDClip, FedAdam, FedAvgAsync, FedBuff, FedYogi, MAPA, SSGD)
    + (SASGD, TWAFL, VanDijk, WKAFL)
}


def make_strategy(name: str, **params: Any) -> Strategy:
    """Build a strategy by its registered name."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {sorted(STRATEGIES)}") from None
    return cls(**params)


def default_strategy() -> tuple[str, float]:
    """Fleet's default strategy and its own rate: what a deployment that sets nothing runs (the
    declared default, not the environment's FLEET_STRATEGY)."""
    from server.settings import Settings

    name = str(Settings.model_fields["strategy"].default)
    return name, float(make_strategy(name).learning_rate)


__all__ = [
    "AdaBuff",
    "AdaSGD",
    "Arrival",
    "AUDP",
    "DynSGD",
    "DynSGDClip",
    "FedAdam",
    "FedAvgAsync",
    "FedBuff",
    "FedYogi",
    "MAPA",
    "SASGD",
    "SSGD",
    "STRATEGIES",
    "default_strategy",
    "Strategy",
    "StrategySettings",
    "TaskTerms",
    "TWAFL",
    "VanDijk",
    "WKAFL",
    "make_strategy",
]
