"""A(DP)²SGD's privacy: Theorem 2 in closed form (the seed's bound) and the accountant's figures.

Theorem 2 (seed-algorithms.md §4.4) is stated in the paper's units: σ is the absolute std of the noise on
the *mean* gradient of B examples, each f_i G-Lipschitz (here: clipped to G = C), replace-one adjacency
(Δ₂ = 2G/B), and a logical view in which each iteration samples a random worker then B of its n_k
examples without replacement, rate γ ≤ B/(K·n_(1)). Per step it bounds the subsampled Gaussian's RDP by
5γ²α·Δ₂²/σ² (Wang et al.'s simplified bound, valid when σ²/Δ₂² ≥ 1.5 and α ≤ log(1/(γ(1 + σ²/Δ₂²)))).
dp-accounting computes the same mechanism's RDP numerically (``replace_one_rdp``); the closed form must
lie above it wherever its conditions hold. In simulator units (noise multiplier σ_m on the clipped sum,
divided by B) σ = σ_m·C/B, so σ²/Δ₂² = σ_m²/4: Theorem 2 applies only from σ_m ≥ √6 ≈ 2.45.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Theorem2:
    """One application of Theorem 2: the σ (paper units), the order α, the split μ, and its conditions."""

    sigma: float
    alpha: float
    mu: float
    sigma_condition: bool  # ε ≤ 10B²Tα/(3K²n²μ), i.e. σ² ≥ 6G²/B²
    alpha_condition: bool  # α ≤ log(K³n³με / (K²n²μεB + 5TαB³))

    @property
    def valid(self) -> bool:
        return self.sigma_condition and self.alpha_condition


def theorem2_sigma(
    epsilon: float, delta: float, *, steps: int, learners: int, n_min: int, batch: int, lipschitz: float,
    mu: float,
) -> Theorem2:  # fmt: skip
    """Theorem 2 verbatim: α = log(1/δ)/((1−μ)ε) + 1, σ² = 20G²Tα/(K²n_(1)²με), and its two conditions."""
    if not 0 < mu < 1:
        raise ValueError(f"μ must be in (0, 1), got {mu}")
    T, K, n, B, G = steps, learners, n_min, batch, lipschitz
    alpha = math.log(1 / delta) / ((1 - mu) * epsilon) + 1
    sigma2 = 20 * G**2 * T * alpha / (K**2 * n**2 * mu * epsilon)
    kn = K * n
    inner = kn**3 * mu * epsilon / (kn**2 * mu * epsilon * B + 5 * T * alpha * B**3)
    return Theorem2(
        sigma=math.sqrt(sigma2), alpha=alpha, mu=mu,
        sigma_condition=epsilon <= 10 * B**2 * T * alpha / (3 * K**2 * n**2 * mu),
        alpha_condition=inner > 1 and alpha <= math.log(inner),
    )  # fmt: skip


def best_theorem2_sigma(epsilon: float, delta: float, **kw: float) -> Theorem2 | None:
    """§4.7.4: the μ whose σ is smallest among those meeting both conditions (None: no μ does)."""
    fits = [
        t for mu in np.linspace(0.001, 0.999, 999) if (t := theorem2_sigma(epsilon, delta, mu=mu, **kw)).valid
    ]
    return min(fits, key=lambda t: t.sigma, default=None)


def theorem2_rdp(sigma: float, *, steps: int, learners: int, n_min: int, batch: int, lipschitz: float,
                 orders: np.ndarray) -> np.ndarray:  # fmt: skip
    """The proof's RDP curve 20G²Tα/(K²n_(1)²σ²) at ``orders``."""
    return 20 * lipschitz**2 * steps * np.asarray(orders, float) / (learners**2 * n_min**2 * sigma**2)


def theorem2_alpha_max(sigma: float, *, learners: int, n_min: int, batch: int, lipschitz: float) -> float:
    """The largest order Lemma 2's bound holds at: log(1/(γ(1 + σ²/Δ₂²))), γ = B/(K·n_(1))."""
    gamma, ratio = batch / (learners * n_min), (sigma * batch / (2 * lipschitz)) ** 2
    return math.log(1 / (gamma * (1 + ratio)))


def theorem2_epsilon(sigma: float, delta: float, *, steps: int, learners: int, n_min: int, batch: int,
                     lipschitz: float) -> float | None:  # fmt: skip
    """The ε Theorem 2 certifies for a given σ: eq. (24) minimised over the admissible α (None: no α is;
    μ is then the share of ε from the RDP term). Classic conversion ε(α) + log(1/δ)/(α − 1)."""
    shape = dict(learners=learners, n_min=n_min, batch=batch, lipschitz=lipschitz)
    if (sigma * batch / (2 * lipschitz)) ** 2 < 1.5:
        return None
    alpha_max = theorem2_alpha_max(sigma, **shape)
    rate = float(theorem2_rdp(sigma, steps=steps, orders=[1.0], **shape)[0])
    alpha = min(1 + math.sqrt(math.log(1 / delta) / rate), alpha_max)
    if alpha <= 1:
        return None
    return rate * alpha + math.log(1 / delta) / (alpha - 1)


def accountant_epsilon(sigma: float, delta: float, *, steps: int, learners: int, n_min: int, batch: int,
                       lipschitz: float) -> float:  # fmt: skip
    """The same mechanism by dp-accounting: B of K·n_(1) without replacement, replace-one, multiplier σ/Δ₂."""
    from fleet_protocol.accounting import rdp_epsilon, replace_one_rdp

    multiplier = sigma * batch / (2 * lipschitz)
    return rdp_epsilon(replace_one_rdp(multiplier, batch, learners * n_min, steps), delta)


def learner_epsilon(sigma_m: float, sampling_rate: float, steps: int, delta: float) -> float:
    """What Fleet's ledger charges a learner: its own ``steps`` Poisson-subsampled Gaussian steps at
    q = B/n_k (add/remove), the per-worker accounting of §4.7.3 (no amplification from the worker draw)."""
    from fleet_protocol.accounting import PrivacyEvent, epsilon

    if sigma_m <= 0:
        return math.inf
    return epsilon([PrivacyEvent(sigma_m, sampling_rate, steps)], delta)
