"""FedBuff (Nguyen et al. 2022): buffer K gradients, weigh each by 1/sqrt(1+τ), step by their mean.

The production anchor among asynchronous strategies; with K = 1 it is plain polynomially damped SGD.
"""

from __future__ import annotations

from typing import Literal

from server.strategies.base import Arrival, Strategy, StrategySettings
from server.strategies.dampening import sqrt_dampening


class FedBuffSettings(StrategySettings):
    name: Literal["fedbuff"] = "fedbuff"


class FedBuff(Strategy):
    name = "fedbuff"
    settings = FedBuffSettings
    average = True

    def __init__(self, *, learning_rate: float = 0.2, k: int = 10, time_window: float | None = None) -> None:
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)

    def weigh(self, arrival: Arrival) -> float:
        return sqrt_dampening(arrival.staleness)
