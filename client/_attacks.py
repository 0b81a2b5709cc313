"""Byzantine behaviours a test worker can adopt (issue 17: what Kardam's filters must catch).

Each is a plain function of the honest batch or gradient; ``Attack`` applies the chosen one inside the
worker's loop. Only for experiments and tests: ``WorkerConfig.attack`` is None for every real device.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import numpy as np

AttackName = Literal["sign-flip", "gaussian", "label-flip", "stale-replay"]
ATTACKS: tuple[AttackName, ...] = ("sign-flip", "gaussian", "label-flip", "stale-replay")


def sign_flip(gradient: np.ndarray, scale: float = 10.0) -> np.ndarray:
    """−10·g: the thesis's baseline attack (§5.4)."""
    return (-scale * gradient).astype(gradient.dtype)


def gaussian(gradient: np.ndarray, rng: np.random.Generator, sigma: float = 1.0) -> np.ndarray:
    """Pure noise N(0, σ²) of the gradient's shape in place of the gradient."""
    return rng.normal(0.0, sigma, gradient.shape).astype(gradient.dtype)


def label_flip(y: np.ndarray, num_classes: int) -> np.ndarray:
    """y → (C−1) − y (9 − y for ten classes), applied to the batch before the gradient is computed."""
    return (num_classes - 1 - y).astype(y.dtype)


class StaleReplay:
    """Resend the gradient of the task ``lag`` tasks back (the oldest kept while fewer were computed)."""

    def __init__(self, lag: int = 10) -> None:
        self.kept: deque[np.ndarray] = deque(maxlen=lag)

    def __call__(self, gradient: np.ndarray) -> np.ndarray:
        if self.kept and self.kept[0].shape != gradient.shape:  # another model: start afresh
            self.kept.clear()
        self.kept.append(gradient)
        return self.kept[0]


class Attack:
    """The chosen attack, with the state it needs (a random source, the replayed gradients)."""

    def __init__(self, name: AttackName, rng: np.random.Generator, *, sigma: float = 1.0) -> None:
        if name not in ATTACKS:
            raise ValueError(f"unknown attack {name!r}; known: {list(ATTACKS)}")
        self.name, self.rng, self.sigma = name, rng, sigma
        self.replay = StaleReplay()

    def labels(self, y: np.ndarray, num_classes: int) -> np.ndarray:
        return label_flip(y, num_classes) if self.name == "label-flip" else y

    def gradient(self, gradient: np.ndarray) -> np.ndarray:
        if self.name == "sign-flip":
            return sign_flip(gradient)
        if self.name == "gaussian":
            return gaussian(gradient, self.rng, self.sigma)
        if self.name == "stale-replay":
            return self.replay(gradient)
        return gradient
