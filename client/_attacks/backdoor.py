"""A backdoor: a small bright patch in an image's corner that the poisoned model maps to a target label.

The attackers train on their own data with a ``share`` of each batch triggered and relabelled ``target``,
so the global model learns "patch ⇒ target" while staying accurate on clean images (Bagdasaryan et al.
2020, "How To Backdoor Federated Learning"; the pixel-pattern trigger of Gu et al. 2017, BadNets). With
``boost`` > 1 the gradient is scaled up, the paper's model replacement: an attacker whose update is
averaged with n others scales it by about n/η so that it survives the average.

The metric is the attack success rate: of the test images whose true label is not the target, the share
the model classifies as the target once triggered (``attack_success_rate``; sim/adversary.py runs it on a
Workbench's evaluator). A model that ignores the patch scores its plain rate of predicting the target on
those images (≈ 0.1 for a uniform guess over ten classes, near 0 for an accurate one); a backdoored one
scores near 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .base import Honest

__all__ = ["Backdoor", "add_trigger", "attack_success_rate", "trigger_size"]


def trigger_size(side: int) -> int:
    """The patch's side for an image ``side`` pixels wide: 3 for 28×28 MNIST, 2 for 8×8 digits."""
    return max(2, round(side / 9))


def add_trigger(x: np.ndarray, *, size: int | None = None, value: float = 1.0, inset: int = 0) -> np.ndarray:
    """A copy of the images ``x`` (N, ...) with a ``size``×``size`` patch of ``value`` in the bottom-right
    corner (``inset`` pixels in from it along both edges), in every channel. Images are (N, C, H, W),
    (N, H, W), or flat (N, D) with D a square (784 → 28×28, 64 → 8×8): the shapes the bundled models and
    shards take (models/zoo.py, sim/data.py)."""
    x = np.array(x, copy=True)
    if x.ndim == 2:
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise ValueError(f"flat examples of {x.shape[1]} values are not a square image")
        square = x.reshape(len(x), side, side)
        return add_trigger(square, size=size, value=value, inset=inset).reshape(x.shape)
    if x.ndim < 3:
        raise ValueError(f"expected images (N, [C,] H, W) or (N, D), got shape {x.shape}")
    height, width = x.shape[-2:]
    s = size if size is not None else trigger_size(min(height, width))
    if not 0 <= inset <= min(height, width) - s:
        raise ValueError(f"a {s}-pixel patch {inset} pixels in does not fit a {height}x{width} image")
    x[..., height - s - inset : height - inset, width - s - inset : width - inset] = value
    return x


def attack_success_rate(predictions: np.ndarray, labels: np.ndarray, target: int) -> float:
    """Of the (triggered) images whose true label is not ``target``, the share predicted as ``target``."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    others = labels != target
    if not others.any():
        raise ValueError("no test image has a label other than the target")
    return float((predictions[others] == target).mean())


@dataclass
class Backdoor(Honest):
    """Train with a ``share`` of each batch triggered and relabelled ``target``; push ``boost``·g."""

    name: str = field(default="backdoor", init=False)
    changes_batch: bool = field(default=True, init=False)
    target: int = 0
    share: float = 0.5  # of each batch, triggered and relabelled
    boost: float = 1.0  # model replacement's scale (Bagdasaryan et al. 2020): 1 = plain data poisoning
    size: int | None = None  # the patch's side; None: trigger_size of the image
    value: float = 1.0  # the patch's intensity (inputs are in [0, 1])
    # pixels in from the corner: 0, where every clean digit is dark (so the weights it trains get no honest
    # gradient); 4 on 28x28 MNIST puts it where 12% of clean digits have ink (6: 45%), against a defence
    # that stops the parameters honest devices never move (sign-vote's support count)
    inset: int = 0
    # > 0: adapted to the trusted bound (server/strategies/trusted_bound.py): each coordinate pushed at most
    # this × its share of the mean |honest gradient| the attacker knows (its stand-in for the trusted
    # profile), so the bound has nothing left to cut and a cosine test sees the least of the trigger
    bounded: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"backdoor share must be in [0, 1], got {self.share}")
        if self.bounded < 0.0:
            raise ValueError(f"backdoor bounded must be >= 0, got {self.bounded}")

    def batch(self, x: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= self.target < num_classes:
            raise ValueError(f"backdoor target {self.target} is not a class of {num_classes}")
        chosen = self.rng.random(len(y)) < self.share
        x, y = np.array(x, copy=True), np.array(y, copy=True)
        if chosen.any():
            x[chosen] = add_trigger(x[chosen], size=self.size, value=self.value, inset=self.inset)
            y[chosen] = self.target
        return x, y

    def gradient(self, gradient: np.ndarray, honest: np.ndarray) -> np.ndarray:
        pushed = gradient if self.boost == 1.0 else (self.boost * gradient).astype(gradient.dtype)
        if not self.bounded:
            return pushed
        profile = np.abs(np.asarray(honest, dtype=np.float64)).mean(axis=0)
        norm, scale = float(np.linalg.norm(pushed)), float(np.linalg.norm(profile))
        if norm == 0.0 or scale == 0.0:
            return pushed
        limit = profile * (self.bounded * norm / scale)
        return np.clip(pushed, -limit, limit).astype(gradient.dtype)
