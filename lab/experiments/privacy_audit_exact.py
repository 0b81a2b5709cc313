"""Why a van Dijk round draws a fixed number of noises: U's exact privacy curve, on a grid, for a round with
one noised step per sampled example (|S| steps) and for the shipped one (s steps, examples put in them at
random), against the ledger's charge (one Poisson-subsampled Gaussian event at (σ, q), replace-one).

The loss is the "eraser", in units of C: each ordinary step undoes the running sum as far as its clip
allows (u → u − clip(u, 1) + noise, a quadratic whose step size is its curvature's inverse), the canary
adds +1 and its replacement −1. With |S| steps the round without the canary has one noise fewer than the
rounds with it, and the eraser leaves little else to hide it: ε exceeds the charge. Empirical audits
cannot see this (it lives at δ ~ 1e-8); densities on a grid can. The fixed-count round's slot counts are
taken as independent Binomial(N − 1, q/s) (near-exact for large N).
"""

from __future__ import annotations

from typing import Any

import numpy as np

STEP = 0.02  # grid spacing, in units of C


class Grid:
    """Densities of U on a grid: Gaussian noise by FFT, a step's map by moving mass."""

    def __init__(self, sigma: float) -> None:
        from scipy import stats

        self.limit = 12 * sigma + 10
        self.x = np.arange(-self.limit, self.limit + STEP / 2, STEP)
        reach = int(np.ceil(9 * sigma / STEP))
        kernel = stats.norm.pdf(np.arange(-reach, reach + 1) * STEP, 0.0, sigma)
        self.reach, self.size = reach, 1 << int(np.ceil(np.log2(len(self.x) + len(kernel))))
        self.kernel = np.fft.rfft(kernel / kernel.sum(), self.size)
        self._maps: dict[int, np.ndarray] = {}

    def point(self) -> np.ndarray:
        p = np.zeros(len(self.x))
        p[np.argmin(np.abs(self.x))] = 1.0
        return p

    def noise(self, p: np.ndarray) -> np.ndarray:
        out = np.fft.irfft(np.fft.rfft(p, self.size) * self.kernel, self.size)
        return np.maximum(out[self.reach : self.reach + len(self.x)], 0.0)

    def erase(self, p: np.ndarray, k: int, shift: float = 0.0) -> np.ndarray:
        """k eraser steps' gradients at once (u − k·clip(u, 1)) plus ``shift`` (a canary's ±1)."""
        if k not in self._maps:
            moved = self.x - k * np.clip(self.x, -1.0, 1.0)
            self._maps[k] = np.clip(np.round((moved + self.limit) / STEP).astype(int), 0, len(self.x) - 1)
        out = np.zeros(len(self.x))
        np.add.at(out, self._maps[k], p)
        return np.roll(out, int(round(shift / STEP)))


def _epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """The smallest ε with both hockey-stick divergences ≤ δ (bisection)."""
    low, high = 0.0, 60.0
    for _ in range(60):
        mid = (low + high) / 2
        gap = max(np.maximum(p - np.exp(mid) * q, 0).sum(), np.maximum(q - np.exp(mid) * p, 0).sum())
        low, high = (mid, high) if gap > delta else (low, mid)
    return high


def per_example_round(sigma: float, n: int, s: int, delta: float) -> float:
    """ε of U for the round with one noised step per sampled example (at least one noise)."""
    from scipy import stats

    grid, q = Grid(sigma), s / n
    last = int(stats.binom.ppf(1 - 1e-13, n - 1, q)) + 1
    others = [grid.point()]
    for _ in range(last + 1):
        others.append(grid.noise(grid.erase(others[-1], 1)))
    with_canary, with_other = np.zeros(len(grid.x)), np.zeros(len(grid.x))
    without = np.zeros(len(grid.x))
    for count in range(last + 1):
        weight = stats.binom.pmf(count, n - 1, q)
        without += weight * (others[count] if count else grid.noise(grid.point()))
        for h in range(count + 1):  # the canary's step comes after h of the others
            a = grid.noise(grid.erase(others[h], 0, +1.0))
            b = grid.noise(grid.erase(others[h], 0, -1.0))
            for _ in range(count - h):
                a, b = grid.noise(grid.erase(a, 1)), grid.noise(grid.erase(b, 1))
            with_canary += weight * a / (count + 1)
            with_other += weight * b / (count + 1)
    return _epsilon((1 - q) * without + q * with_canary, (1 - q) * without + q * with_other, delta)


def fixed_count_round(sigma: float, n: int, s: int, delta: float) -> float:
    """ε of U for the shipped round: s noised steps, each sampled example in one of them at random."""
    from scipy import stats

    grid, q = Grid(sigma), s / n
    counts = stats.binom.pmf(np.arange(9), n - 1, q / s)

    def step(p: np.ndarray, shift: float = 0.0) -> np.ndarray:
        return grid.noise(sum(c * grid.erase(p, k, shift) for k, c in enumerate(counts)))

    prefix = [grid.point()]
    for _ in range(s):
        prefix.append(step(prefix[-1]))
    with_canary, with_other = np.zeros(len(grid.x)), np.zeros(len(grid.x))
    for h in range(s):
        a, b = step(prefix[h], +1.0), step(prefix[h], -1.0)
        for _ in range(s - h - 1):
            a, b = step(a), step(b)
        with_canary, with_other = with_canary + a / s, with_other + b / s
    without = prefix[s]
    return _epsilon((1 - q) * without + q * with_canary, (1 - q) * without + q * with_other, delta)


def exact_rows(cases: tuple[tuple[float, int, int], ...], delta: float) -> list[dict[str, Any]]:
    """Each (σ, N, s): the charge and both rounds' exact ε at δ."""
    from fleet_protocol.accounting import PrivacyEvent, epsilon

    return [
        {
            "sigma": sigma,
            "examples": n,
            "steps": s,
            "q": s / n,
            "claimed": epsilon([PrivacyEvent(sigma, s / n)], delta),
            "per_example_steps": per_example_round(sigma, n, s, delta),
            "fixed_steps": fixed_count_round(sigma, n, s, delta),
        }
        for sigma, n, s in cases
    ]
