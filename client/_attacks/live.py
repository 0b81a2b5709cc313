"""How an attacking live device estimates the honest spread: from its own data only.

A simulated attacker may read the honest gradients that reached the server (sim/adversary.py); a real
device sees none. ALIE and IPM on a device therefore estimate μ and σ from its own task gradient and
``attack.estimates`` more gradients of fresh mini-batches of its own data, on the same parameters: a weaker,
non-omniscient variant (one device's data, typically non-IID, stands in for the fleet's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from .base import Attack

__all__ = ["attacked", "honest_rows", "splice_head", "with_clean_head"]


class _Data(Protocol):
    def batch(self, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]: ...


class _Gradients(Protocol):
    def loss_and_gradient(
        self, params: np.ndarray, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, np.ndarray]: ...


def attacked(
    attack: Attack,
    gradient: np.ndarray,
    *,
    session: _Gradients,
    params: np.ndarray,
    data: _Data,
    batch_size: int,
    rng: np.random.Generator,
    fit: Callable[[np.ndarray], np.ndarray],
    clean: tuple[np.ndarray, np.ndarray] | None = None,
    head: tuple[slice, slice] | None = None,
) -> np.ndarray:
    """What an attacking device pushes instead of ``gradient``: ALIE and IPM estimate the honest spread from
    its own batches (``honest_rows``); with ``clean`` and ``head``, the output layer is the clean batch's
    (``Backdoor.honest_head``)."""
    honest = honest_rows(
        attack, gradient, session=session, params=params, data=data, batch_size=batch_size, rng=rng, fit=fit
    )
    pushed = attack.gradient(gradient, honest)
    if clean is None or head is None:
        return pushed
    return with_clean_head(pushed, session=session, params=params, clean=clean, head=head)


def honest_rows(
    attack: Attack,
    gradient: np.ndarray,
    *,
    session: _Gradients,
    params: np.ndarray,
    data: _Data,
    batch_size: int,
    rng: np.random.Generator,
    fit: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """(1 + ``attack.estimates``, d): the task's gradient, then that many on fresh batches of ``data``."""
    rows = [gradient]
    for _ in range(attack.estimates):
        x, y = data.batch(batch_size, rng)
        rows.append(session.loss_and_gradient(params, fit(x), y)[1])
    return np.stack(rows)


def with_clean_head(
    pushed: np.ndarray,
    *,
    session: _Gradients,
    params: np.ndarray,
    clean: tuple[np.ndarray, np.ndarray],
    head: tuple[slice, slice],
) -> np.ndarray:
    """``pushed`` with its output layer (``Manifest.head``) replaced by the clean batch's: what a backdoor
    that keeps the output layer honest sends (``Backdoor.honest_head``; the simulator's: sim/adversary.py)."""
    return splice_head(pushed, session.loss_and_gradient(params, *clean)[1], head)


def splice_head(pushed: np.ndarray, kept: np.ndarray, head: tuple[slice, slice]) -> np.ndarray:
    """A copy of ``pushed`` with ``kept``'s output-layer weight and bias (``head``: ``Manifest.head``)."""
    pushed = np.array(pushed, copy=True)
    pushed[head[0]], pushed[head[1]] = kept[head[0]], kept[head[1]]
    return pushed
