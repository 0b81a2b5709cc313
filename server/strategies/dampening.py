"""Staleness dampening functions Λ(τ): pure, so they are tested against hand-computed values."""

from __future__ import annotations

import math


def inverse_dampening(tau: float) -> float:
    """DynSGD's 1/(τ+1)."""
    return 1.0 / (tau + 1.0)


def adasgd_beta(tau_thres: float) -> float:
    """β such that exp(−β·τ_thres/2) = 1/(τ_thres/2 + 1): AdaSGD and DynSGD cross at τ_thres/2."""
    if tau_thres <= 0:
        raise ValueError("tau_thres must be positive")
    return 2.0 * math.log1p(tau_thres / 2.0) / tau_thres


def exp_dampening(tau: float, beta: float) -> float:
    """AdaSGD's exp(−β·τ)."""
    return math.exp(-beta * tau)


def sqrt_dampening(tau: float) -> float:
    """FedBuff's polynomial 1/sqrt(1+τ)."""
    return 1.0 / math.sqrt(1.0 + tau)
