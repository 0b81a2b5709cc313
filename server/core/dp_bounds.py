"""The norms a DP push can have: at most ``gradient_bound``, at least ``noise_floor`` (issue 27, finding 15).

Both hold but with a negligible probability (tails of about 1e-12), for an honest device that clips each
example and draws its noise afresh. Above the bound, a push was not clipped; below the floor, it was not
noised (an all-zero gradient, or the exact clipped mean): either is refused before it touches the model.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from fleet_protocol.accounting import LOCAL_SGD, NORM_LAPLACE, TAIL, norm_laplace_bound

__all__ = ["gradient_bound", "noise_floor", "poisson_ceiling"]


def poisson_ceiling(expected_batch: int) -> int:
    """The most examples a Poisson batch of mean B holds, but for a binomial tail of about 1e-15."""
    return math.ceil(expected_batch + 8 * math.sqrt(expected_batch) + 8)


@lru_cache(maxsize=1024)
def _chi_low(num_params: int) -> float:
    """The TAIL-quantile of a standard Gaussian vector's norm in ℝ^d (χ_d)."""
    from scipy import stats

    return math.sqrt(float(stats.chi2(num_params).ppf(TAIL)))


@lru_cache(maxsize=1)
def _z_tail() -> float:
    """z with P(N(0, 1) < −z) = TAIL (about 7.03)."""
    from scipy import stats

    return float(stats.norm.isf(TAIL))


@lru_cache(maxsize=1024)
def _gamma_low(num_params: int, scale: float) -> float:
    """The TAIL-quantile of the norm-Laplace radius, Gamma(d, λ) (the exact sampler)."""
    from scipy import stats

    return float(stats.gamma(num_params, scale=scale).ppf(TAIL))


def gradient_bound(
    clip: float, noise_multiplier: float, batch_size: int, num_params: int, terms: dict[str, Any] | None
) -> float:
    """The largest gradient norm a clipped, noised push can have, except with negligible probability.

    Gaussian (the policy's C and σ): (Σ clipped + noise) / B: the Poisson batch holds at most
    ``poisson_ceiling(B)`` examples of norm ≤ C, and the noise's norm is at most σC(√d + 8) (a χ tail).
    Norm-Laplace (``terms``): G plus the noise radius's TAIL quantile (``norm_laplace_bound``). Local SGD
    round (B = s): the sum, not /B, of the sampled examples' clipped gradients and of exactly s noise
    draws of σC each (one a step, whatever is sampled), √s·σC(√d + 8)."""
    if terms is not None and terms.get("mechanism") == NORM_LAPLACE:
        return _laplace_bound(float(terms["clip"]), _laplace_scale(terms), num_params, str(terms["noise"]))
    if terms is not None and terms.get("mechanism") == LOCAL_SGD:
        c, sigma = float(terms["clip"]), float(terms["noise_multiplier"])
        return c * poisson_ceiling(batch_size) + sigma * c * math.sqrt(batch_size) * (
            math.sqrt(num_params) + 8
        )
    c, sigma, b = clip, noise_multiplier, batch_size
    return (c * poisson_ceiling(b) + sigma * c * (math.sqrt(num_params) + 8)) / b


def noise_floor(
    clip: float, noise_multiplier: float, batch_size: int, num_params: int, terms: dict[str, Any] | None
) -> float | None:
    """The smallest gradient norm a noised push can have, except with probability about 2·TAIL (None:
    no useful floor).

    Gaussian step: the noise N ~ N(0, σ²C²I) is drawn independently of the clipped sum S, so S can cancel
    only N's component along S, itself N(0, σ²C²): ‖S + N‖² ≥ ‖N‖² − z²σ²C² whatever ‖S‖ (z: the TAIL
    quantile), and ‖N‖ ≥ σC·χ_d's TAIL quantile; over B. Local SGD round (s noise draws, one a step):
    later gradients depend on earlier noise, so only the triangle inequality holds:
    √s·σC·χ_low − C·poisson_ceiling(s). Norm-Laplace (exact sampler): the radius's TAIL quantile − G."""
    if terms is not None and terms.get("mechanism") == NORM_LAPLACE:
        if terms.get("noise") != "exact":
            return None
        floor = _gamma_low(num_params, _laplace_scale(terms)) - float(terms["clip"])
    elif terms is not None and terms.get("mechanism") == LOCAL_SGD:
        c, sigma = float(terms["clip"]), float(terms["noise_multiplier"])
        floor = math.sqrt(batch_size) * sigma * c * _chi_low(num_params) - c * poisson_ceiling(batch_size)
    else:
        low, z = _chi_low(num_params), _z_tail()
        if low <= z:
            return None
        floor = noise_multiplier * clip * math.sqrt(low**2 - z**2) / batch_size
    return floor if floor > 0 else None


def _laplace_scale(terms: dict[str, Any]) -> float:
    return float(terms["sensitivity"]) / float(terms["epsilon_step"])


@lru_cache(maxsize=1024)
def _laplace_bound(clip: float, scale: float, num_params: int, sampler: str) -> float:
    return norm_laplace_bound(clip, scale, num_params, sampler)
