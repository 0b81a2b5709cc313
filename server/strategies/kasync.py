"""K-asynchronous aggregation (WKAFL and its baselines, docs seed-algorithms.md §6): the first K arrivals.

The server steps once K gradients have arrived and the devices that pushed them pull the new model; the
others keep computing on their older models and their gradients go into the next step's K (nothing is
dropped, §6.6.10: late gradients are reused). Fleet's K-buffer is exactly this quorum because devices pull:
a device that pushed asks for its next task and is handed the newest version. This base keeps, beside each
buffered gradient, what these rules read of it: its staleness, batch size and the device's loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from server.strategies.base import Arrival, Strategy

HALF_E = math.e / 2.0


def staleness_weight(tau: float) -> float:
    """a(τ) = (e/2)^−τ (Chen et al., the weight WKAFL and TWAFL use); underflows to 0.0 past τ ≈ 2,300."""
    return HALF_E ** (-max(0.0, tau))


@dataclass(frozen=True)
class Tag:
    """What a K-async rule reads of a buffered arrival besides its gradient."""

    staleness: int
    batch_size: int
    loss: float | None  # None: the push sent no loss (DP)


class KAsync(Strategy):
    """A strategy that keeps each buffered arrival's staleness, batch size and loss (``tags``)."""

    name = "k-async"

    def __init__(self, *, learning_rate: float = 0.05, k: int = 10, time_window: float | None = None) -> None:
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)
        self.tags: list[Tag] = []

    def receive(self, arrival: Arrival) -> float:
        weight = super().receive(arrival)
        loss = None if arrival.loss is None else float(arrival.loss)
        self.tags.append(Tag(arrival.staleness, arrival.batch_size, loss))
        return weight

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        new = super().aggregate(params)
        self.tags.clear()
        return new

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "tags": [[t.staleness, t.batch_size, t.loss] for t in self.tags]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.tags = [
            Tag(int(s), int(b), None if loss is None else float(loss)) for s, b, loss in state.get("tags", [])
        ]

    def normalised(self) -> np.ndarray:
        """The buffered weights over their sum (float64); all on the least stale if every one underflowed."""
        weights = np.array([b.weight for b in self.buffer], dtype=np.float64)
        total = weights.sum()
        if total > 0:
            return weights / total
        fallback = np.zeros(len(weights))
        fallback[int(np.argmin([t.staleness for t in self.tags]))] = 1.0
        return fallback

    def weighted_sum(self, weights: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Σ_i weights_i · rows_i (the buffered gradients by default), as float32."""
        rows = np.stack([b.gradient for b in self.buffer]) if rows is None else rows
        return (weights @ rows.astype(np.float64)).astype(np.float32)
