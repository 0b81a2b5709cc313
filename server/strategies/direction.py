"""Replacing the step's direction of any strategy: what a defence over the buffer (issue 30) needs.

A wrapper sees the buffer its strategy filled (``Strategy.buffer``), but the step's direction is the
innermost strategy's ``combine``: a linear map of the buffered gradients (a weighted sum, a weighted mean,
TWAFL's normalised sum). ``contributions`` rescales each buffered gradient so that their plain mean is
exactly what ``combine`` gives (``Strategy.coefficients``), so a robust
statistic of them stands in for the mean: the staleness and share weights are applied first, the robust
statistic is taken of the weighted gradients. ``step_with`` then steps the wrapped strategy along a chosen
direction instead (the buffer becomes one gradient of weight 1, which every ``combine`` here maps to
itself) through the wrappers in between, so a warm-up, a momentum or the concurrency scale still apply.

VanDijk and WKAFL step by more than their buffer's combination (VanDijk's step is its last weight, WKAFL
aggregates its own way with per-arrival tags): ``own_aggregate`` names them, and server/settings_rules.py
refuses a direction-replacing wrapper around them.
"""

from __future__ import annotations

import numpy as np

from server.strategies.base import Buffered, Strategy

OWN_AGGREGATE: dict[str, str] = {
    "vandijk": "its step size is its last buffered weight",
    "wkafl": "it aggregates its buffer its own way (with per-arrival tags)",
}


def innermost(strategy: Strategy) -> Strategy:
    """The strategy inside its wrappers (each wrapper keeps the one it wraps as ``inner``)."""
    while hasattr(strategy, "inner"):
        strategy = strategy.inner
    return strategy


def own_aggregate(strategy: Strategy) -> str | None:
    """Why the innermost strategy's step is not its buffer's combination (``OWN_AGGREGATE``), or None."""
    return OWN_AGGREGATE.get(innermost(strategy).name)


def contributions(strategy: Strategy) -> np.ndarray:
    """The buffered gradients as rows u_i = n·c_i·G_i (float64): their mean is the strategy's own
    direction, so a robust statistic of the rows replaces it at the same scale."""
    buffer = innermost(strategy).buffer
    if not buffer:
        return np.zeros((0, 0))
    scale = len(buffer) * innermost(strategy).coefficients()
    return np.stack([s * b.gradient.astype(np.float64) for s, b in zip(scale, buffer, strict=True)])


def step_with(strategy: Strategy, params: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """``strategy.aggregate(params)`` with ``direction`` as the buffer's combination."""
    buffer = strategy.buffer
    if buffer:
        last = buffer[-1]
        buffer[:] = [Buffered(last.task_id, 1.0, direction.astype(np.float32), last.received_at)]
    return strategy.aggregate(params)
