"""DynSGD: dampen every gradient by 1/(τ+1), no similarity boost."""

from __future__ import annotations

from server.strategies.base import Arrival, Strategy
from server.strategies.dampening import inverse_dampening


class DynSGD(Strategy):
    name = "dynsgd"

    def weigh(self, arrival: Arrival) -> float:
        return inverse_dampening(arrival.staleness)
