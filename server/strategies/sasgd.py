"""SASGD (Zhang et al.; WKAFL's baseline, seed-algorithms.md §6.5): each gradient at rate η0/τ, K averaged.

w ← w − (1/K) Σ_i (η0/τ_i) g_i. Fleet counts τ from 0 (computed on the newest model), the authors' code from
1, so the rate here is η0/(τ + 1): the code's rule, defined for a fresh gradient.
"""

from __future__ import annotations

from typing import Literal

from server.strategies.base import Arrival, StrategySettings
from server.strategies.dampening import inverse_dampening
from server.strategies.kasync import KAsync


class SASGDSettings(StrategySettings):
    name: Literal["sasgd"] = "sasgd"


class SASGD(KAsync):
    name = "sasgd"
    settings = SASGDSettings
    average = True

    def weigh(self, arrival: Arrival) -> float:
        return inverse_dampening(max(0, arrival.staleness))
