"""Sybil devices: many identities from one enrollment key, all sending one malicious update.

Nothing in Fleet (yet) limits how many devices one enrollment key may create (issue 30). A ``Sybil``
attack is another attack (``inner``, sign-flip by default) run by ``count`` devices enrolled with the same
key: live, ``fleet worker --attack sybil --sybils N`` starts N workers in one process, each with its own
install secret (client/_sybils.py); in the simulator, the attackers all record one key id
(sim/adversary.py). What each pushes is the inner attack's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Attack

__all__ = ["Sybil"]


@dataclass
class Sybil:
    """``inner`` run by ``count`` identities of one enrollment key; batch and gradient are ``inner``'s."""

    inner: Attack
    count: int = 5
    name: str = field(default="sybil", init=False)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"sybil count must be >= 1, got {self.count}")

    @property
    def estimates(self) -> int:
        return self.inner.estimates

    @property
    def changes_batch(self) -> bool:
        return self.inner.changes_batch

    def batch(self, x: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.batch(x, y, num_classes)

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        return self.inner.gradient(gradient, honest)
