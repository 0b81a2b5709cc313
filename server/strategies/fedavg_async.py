"""Staleness-unaware asynchronous averaging: every gradient at weight 1 (diverges under staleness)."""

from __future__ import annotations

from typing import Literal

from server.strategies.base import Arrival, Strategy, StrategySettings


class FedAvgAsyncSettings(StrategySettings):
    name: Literal["fedavg-async"] = "fedavg-async"


class FedAvgAsync(Strategy):
    name = "fedavg-async"
    settings = FedAvgAsyncSettings

    def weigh(self, arrival: Arrival) -> float:
        return 1.0
