"""TWAFL (WKAFL's baseline, docs seed-algorithms.md §6.5): K gradients weighted by batch share × (e/2)^−τ.

w ← w − η Σ_i (m_i a_i / Σ_j m_j a_j) g_i with a_i = (e/2)^−τ_i. The printed rule divides by m = Σ m_i only;
the authors' code normalises by the weights' sum (with equal m_i), which we follow: unnormalised, the step
would vanish at the staleness levels of the experiments ((e/2)^−300 ≈ 1e−40). If every weight underflows,
the least stale gradient is applied alone (the code's fallback).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from server.strategies.base import Arrival, StrategySettings
from server.strategies.kasync import KAsync, staleness_weight


class TWAFLSettings(StrategySettings):
    name: Literal["twafl"] = "twafl"


class TWAFL(KAsync):
    name = "twafl"
    settings = TWAFLSettings

    def weigh(self, arrival: Arrival) -> float:
        return staleness_weight(arrival.staleness) * max(1, arrival.batch_size)

    def coefficients(self) -> np.ndarray:
        return self.normalised() if self.buffer else np.zeros(0)

    def combine(self, params: np.ndarray) -> np.ndarray:
        return self.weighted_sum(self.normalised()) if self.buffer else np.zeros_like(params)
