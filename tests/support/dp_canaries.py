"""Hand-built gradient maps for auditing the DP mechanisms (client/_privacy.py): numpy
``ClippedGradientComputer``s on which a canary's clipped gradient is a fixed direction of norm C (the
strongest canary), and the van Dijk round as it was before issue 27 (noised once), the audit's broken
reference. Shared by tests/test_vandijk_round.py and the lab's privacy audit (lab/experiments/)."""

from __future__ import annotations

import math

import numpy as np

CANARY, ORDINARY, FLAT = 1.0, 0.0, 2.0  # Ridge's example kinds (its x)


def _clip(g: np.ndarray, clip: float) -> np.ndarray:
    """Scalar per-example gradients clipped to |g| ≤ clip (each example's gradient has one coordinate)."""
    return g * np.minimum(1.0, clip / np.maximum(np.abs(g), 1e-300))


class Coordinates:
    """f(w; (k, a)) = ½(w_k − a)²: example i's gradient (w_k − a)·e_k lies on its own coordinate k.

    ``x`` is (n, 2): the coordinate and the target a. At w = 0 a target of −10C is a canary whose clipped
    gradient is +C·e_k (its loss 50C², an outlier), +C an ordinary example (gradient −C·e_k). Examples on
    distinct coordinates are independent trials of one mechanism run (auditing in one run, Steinke et al.
    2023), exact here because the clipped gradients are orthogonal and the Gaussian noise is iid."""

    def __init__(self, num_params: int) -> None:
        self.num_params = num_params

    def clipped_sum(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float
    ) -> tuple[float, np.ndarray]:
        if len(x) == 0:
            return math.nan, np.zeros(self.num_params, dtype=np.float32)
        k = x[:, 0].astype(np.int64)
        residual = flat_params[k].astype(np.float64) - x[:, 1]
        summed = np.bincount(k, weights=_clip(residual, clip), minlength=self.num_params)
        return float(np.mean(0.5 * residual**2)), summed.astype(np.float32)


class Ridge:
    """A 1-D non-convex loss on which one example steers a whole round: ordinary examples roll away from
    the ridge at ``ridge`` (f = −A·κ·log cosh((w − ridge)/κ), gradient −A·tanh(·), |A| ≫ C so it clips to
    ±C past a few κ), the canary pulls with a constant gradient A (clipped to C), a flat example has none.

    Started just above the ridge, ordinary steps climb away from it (gradient −C each); a canary's step of
    η·C crosses it, after which every ordinary step descends (gradient +C). With a ``plateau`` (ordinary
    gradients 0 within it of the ridge) and started on the ridge, ordinary steps stay put until the canary,
    wherever it comes, steps off the plateau."""

    num_params = 1

    def __init__(
        self, ridge: float = 0.0, width: float = 0.01, pull: float = 10.0, plateau: float = 0.0
    ) -> None:
        self.ridge, self.width, self.pull, self.plateau = ridge, width, pull, plateau

    def gradients(self, w: float, x: np.ndarray) -> np.ndarray:
        off = w - self.ridge
        ordinary = 0.0 if abs(off) < self.plateau else -self.pull * np.tanh(off / self.width)
        return np.where(x == CANARY, self.pull, np.where(x == FLAT, 0.0, ordinary))

    def clipped_sum(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float
    ) -> tuple[float, np.ndarray]:
        if len(x) == 0:
            return math.nan, np.zeros(1, dtype=np.float32)
        g = _clip(self.gradients(float(flat_params[0]), np.asarray(x, dtype=np.float64).reshape(-1)), clip)
        return 0.0, np.array([g.sum()], dtype=np.float32)


def once_noised_round(
    session: Ridge | Coordinates,
    flat_params: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    *,
    step_size: float,
    clip: float,
    noise_multiplier: float,
    rng: np.random.Generator,
    local_steps: int | None = None,
) -> np.ndarray:
    """The van Dijk round before issue 27: U = Σ_h g_h + N(0, σ²C²), ŵ −= η·g_h, one example per step.

    ``local_steps`` s: Poisson-sample at q = s/N and visit in random order (what the old client did); None:
    every example, in the order given (a chosen worst case)."""
    if local_steps is not None:
        chosen = np.flatnonzero(rng.random(len(x)) < min(1.0, local_steps / len(x)))
        order = chosen[rng.permutation(len(chosen))]
    else:
        order = np.arange(len(x))
    w = np.array(flat_params, dtype=np.float32, copy=True)
    total = np.zeros(w.size, dtype=np.float64)
    for i in order:
        _, g = session.clipped_sum(w, x[i : i + 1], y[i : i + 1], clip)
        total += g
        w -= np.float32(step_size) * g
    return total + rng.normal(0.0, noise_multiplier * clip, size=total.shape)
