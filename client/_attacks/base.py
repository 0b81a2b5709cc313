"""The one interface every attack implements, so the worker and the simulator apply any of them alike.

An attack may change the mini-batch before the gradient is computed (label flipping, a backdoor) and the
gradient before it is pushed (everything else). ``gradient`` also sees ``honest``: rows of honest gradients
the attacker can estimate the honest spread from. In the simulator they are the honest gradients that
reached the server recently (omniscient, colluding attackers); on a live device they are the device's own
gradient and ``estimates`` more mini-batch gradients of its own data (a weaker, non-omniscient variant).
Attacks are for experiments and tests only: ``WorkerConfig.attack`` is None for every real device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Attack", "Honest"]


@runtime_checkable
class Attack(Protocol):
    """A Byzantine behaviour: ``batch`` before the gradient, ``gradient`` after it."""

    name: str
    estimates: int  # extra own mini-batch gradients a live device computes for ``honest`` (0: none)
    changes_batch: bool  # whether ``batch`` changes anything (the simulator recomputes the gradient if so)

    def batch(self, x: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        """The examples and labels to compute the gradient on (a copy when changed)."""
        ...

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        """What to push instead of ``gradient``; ``honest``: (m, d) honest gradients known to the attacker."""
        ...


@dataclass
class Honest:
    """The identity attack, and the base of the others: each overrides what it changes."""

    name: str = field(default="honest", init=False)
    estimates: int = field(default=0, init=False)
    changes_batch: bool = field(default=False, init=False)
    rng: np.random.Generator = field(default_factory=np.random.default_rng, repr=False, compare=False)
    # push the clean batch's output-layer gradient with the attacked rest, and claim the clean labels: the
    # attack adapted to a defence that reads the output layer (server/strategies/label_check.py); the
    # worker and the simulator splice it (client/_attacks/live.py ``with_clean_head``, sim/adversary.py)
    honest_head: bool = False

    def batch(self, x: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        return x, y

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        return gradient
