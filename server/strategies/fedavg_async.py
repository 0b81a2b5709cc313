"""Staleness-unaware asynchronous averaging: every gradient at weight 1 (diverges under staleness)."""

from __future__ import annotations

from server.strategies.base import Arrival, Strategy


class FedAvgAsync(Strategy):
    name = "fedavg-async"

    def weigh(self, arrival: Arrival) -> float:
        return 1.0
