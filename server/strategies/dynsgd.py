"""DynSGD: dampen every gradient by 1/(τ+1), no similarity boost."""

from __future__ import annotations

from typing import Literal

from server.strategies.base import Arrival, Strategy, StrategySettings
from server.strategies.dampening import inverse_dampening


class DynSGDSettings(StrategySettings):
    name: Literal["dynsgd"] = "dynsgd"


class DynSGD(Strategy):
    name = "dynsgd"
    settings = DynSGDSettings

    def __init__(self, *, learning_rate: float = 0.2, k: int = 1, time_window: float | None = None) -> None:
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)

    def weigh(self, arrival: Arrival) -> float:
        return inverse_dampening(arrival.staleness)
