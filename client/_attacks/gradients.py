"""Attacks on the gradient (and label flipping, the one on the labels): what each pushes, and why.

Each is a small dataclass on ``base.Honest``; its fields are its parameters (``make_attack`` fills them
from ``fleet worker --attack-param KEY=VALUE``). The plain functions are kept for callers that only need
the arithmetic (lab/experiments/kardam.py uses ``sign_flip``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from .base import Honest

__all__ = [
    "ALIE",
    "IPM",
    "Gaussian",
    "LabelFlip",
    "Scaled",
    "StaleReplay",
    "alie_z",
    "gaussian",
    "label_flip",
    "sign_flip",
]


def sign_flip(gradient: np.ndarray, scale: float = 10.0) -> np.ndarray:
    """−k·g (k = 10: the thesis's baseline attack, §5.4)."""
    return (-scale * gradient).astype(gradient.dtype)


def gaussian(gradient: np.ndarray, rng: np.random.Generator, sigma: float = 1.0) -> np.ndarray:
    """Pure noise N(0, σ²) of the gradient's shape in place of the gradient."""
    return rng.normal(0.0, sigma, gradient.shape).astype(gradient.dtype)


def label_flip(y: np.ndarray, num_classes: int) -> np.ndarray:
    """y → (C−1) − y (9 − y for ten classes), applied to the batch before the gradient is computed."""
    return (num_classes - 1 - y).astype(y.dtype)


def alie_z(n: int, f: int) -> float:
    """ALIE's z from n devices of which f attack (Baruch, Baruch, Goldberg 2019, "A Little Is Enough", §3).

    The attackers need s = ⌊n/2 + 1⌋ − f honest devices to "side" with them (lie farther from the mean
    than the attackers' value) for a majority-based rule to prefer the attackers; with honest values
    N(μ, σ²) per coordinate, z is the largest with Φ(z) < (n − s)/n: z = Φ⁻¹((n − s)/n). E.g. n = 10,
    f = 3: s = 3, z = Φ⁻¹(0.7) ≈ 0.52; n = 50, f = 12: z ≈ 0.58. Negative z (f small) is clamped to 0."""
    if not 0 < f < n:
        raise ValueError(f"ALIE needs 0 < f < n, got n={n}, f={f}")
    s = n // 2 + 1 - f
    if s <= 0:  # a majority of attackers: any z is "supported"; the paper's formula no longer applies
        raise ValueError(f"ALIE's formula needs f < n/2 + 1 (s = ⌊n/2 + 1⌋ − f >= 1), got n={n}, f={f}")
    return max(0.0, NormalDist().inv_cdf((n - s) / n))


@dataclass
class Scaled(Honest):
    """−k·g: the honest gradient reversed and magnified; sign-flip is k = 10 (the thesis's attack)."""

    name: str = field(default="scaled", init=False)
    k: float = 10.0

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        return sign_flip(gradient, self.k)


@dataclass
class SignFlip(Scaled):
    """−10·g, under its historical name (issue 17)."""

    name: str = field(default="sign-flip", init=False)


@dataclass
class Gaussian(Honest):
    """Noise N(0, σ²) in place of the gradient."""

    name: str = field(default="gaussian", init=False)
    sigma: float = 1.0

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        return gaussian(gradient, self.rng, self.sigma)


@dataclass
class LabelFlip(Honest):
    """Train on y → C−1−y: a data-poisoning attack, its gradient an honest one of wrong labels. With
    ``share`` under 1, each sample is flipped with that probability and the rest kept: a push that works
    against its digits' own class less, the attack adapted to a defence that scores that (trusted-score's
    ``label_veto``). With ``duty`` under 1, only that share of the pushes is poisoned and the rest are
    honest: a device whose standing over its recent pushes stays above a veto's threshold while a flipped
    push still lands (the attack adapted to the veto's memory)."""

    name: str = field(default="label-flip", init=False)
    changes_batch: bool = field(default=True, init=False)
    share: float = 1.0
    duty: float = 1.0

    def __post_init__(self) -> None:
        for what, value in (("share", self.share), ("duty", self.duty)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"label-flip {what} must be in [0, 1], got {value}")

    def batch(self, x: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        if self.duty < 1.0 and self.rng.random() >= self.duty:
            return x, y  # an honest push, to keep the device's standing up
        if self.share >= 1.0:
            return x, label_flip(y, num_classes)
        chosen = self.rng.random(len(y)) < self.share
        return x, np.where(chosen, label_flip(y, num_classes), y).astype(y.dtype)


class StaleReplay:
    """Resend the gradient of the task ``lag`` tasks back (the oldest kept while fewer were computed)."""

    def __init__(self, lag: int = 10) -> None:
        self.kept: deque[np.ndarray] = deque(maxlen=lag)

    def __call__(self, gradient: np.ndarray) -> np.ndarray:
        if self.kept and self.kept[0].shape != gradient.shape:  # another model: start afresh
            self.kept.clear()
        self.kept.append(gradient)
        return self.kept[0]


@dataclass
class Replay(Honest):
    """A correct but old gradient: the one computed ``lag`` tasks before."""

    name: str = field(default="stale-replay", init=False)
    lag: int = 10
    replay: StaleReplay = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.replay = StaleReplay(self.lag)

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        return self.replay(gradient)


@dataclass
class ALIE(Honest):
    """ "A Little Is Enough" (Baruch et al. 2019): μ − z·σ per coordinate, inside the honest spread.

    μ, σ are the coordinate-wise mean and standard deviation of ``honest``; z is ``alie_z(n, f)`` unless
    given. Every attacker sends the same vector, which hides from distance- and median-based rules while
    shifting each coordinate by z·σ against the honest mean. On a live device μ, σ come from the device's
    own gradient and ``estimates`` more mini-batch gradients of its own data: a weaker, non-omniscient
    variant (one device's data, not the fleet's spread)."""

    name: str = field(default="alie", init=False)
    n: int = 10  # devices the attackers assume (the simulator passes the fleet's)
    f: int = 3  # attackers among them
    z: float | None = None  # None: the paper's formula, alie_z(n, f)
    estimates: int = 8

    def __post_init__(self) -> None:
        if self.z is None:
            self.z = alie_z(int(self.n), int(self.f))

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        rows = np.asarray(honest, np.float64).reshape(-1, gradient.size)
        mu, sigma = rows.mean(axis=0), rows.std(axis=0)
        return (mu - float(self.z or 0.0) * sigma).astype(gradient.dtype)


@dataclass
class IPM(Honest):
    """Inner-product manipulation (Xie, Koyejo, Gupta 2020, "Fall of Empires"): −ε · mean(honest).

    Its inner product with the honest mean is −ε‖μ‖² < 0, so a rule that averages it in descends less (a
    small ε, e.g. 0.1, hides inside the honest spread against median/Krum-like rules) or ascends (a large
    ε, e.g. 10, against the mean). The mean is estimated as ``ALIE``'s is (window or own batches)."""

    name: str = field(default="ipm", init=False)
    epsilon: float = 0.1
    estimates: int = 8

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        rows = np.asarray(honest, np.float64).reshape(-1, gradient.size)
        return (-float(self.epsilon) * rows.mean(axis=0)).astype(gradient.dtype)
