"""An empirical lower bound on ε from membership tests (Jagielski et al. 2020; Nasr et al. 2021).

A mechanism that is (ε, δ)-DP satisfies P(M(D) ∈ E) ≤ e^ε·P(M(D') ∈ E) + δ for every event E and both
orders of D, D'. Run it many times with a canary in (D) and out (D': the canary replaced by an ordinary
example), score each run, and take E = {score ≥ t} or {score < t}: with Clopper–Pearson bounds on the two
rates, ε ≥ log((P_low(E) − δ) / Q_high(E)) holds at the stated confidence. The event (threshold, side,
order) is chosen on a first share of the runs and the bound computed on the rest, so picking the best of
many thresholds does not inflate the confidence.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

CANDIDATES = 2000  # thresholds tried on the selection share (quantiles of its pooled scores)


def clopper_pearson(k: np.ndarray, n: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial bounds on a rate from k successes in n runs; each side holds with probability
    1 − (1 − confidence)/2, so both together hold with probability ≥ ``confidence``."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=np.float64)
    tail = (1.0 - confidence) / 2
    low = np.where(k > 0, beta.ppf(tail, np.maximum(k, 1), n - k + 1), 0.0)
    high = np.where(k < n, beta.ppf(1 - tail, k + 1, np.maximum(n - k, 1)), 1.0)
    return low, high


def _rates(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many scores are ≥ each threshold."""
    ordered = np.sort(scores)
    return len(ordered) - np.searchsorted(ordered, thresholds, side="left")


def _bounds(
    inside: np.ndarray, outside: np.ndarray, thresholds: np.ndarray, delta: float, confidence: float
) -> dict[str, np.ndarray]:
    """ε lower bounds at each threshold for the four (event, order) tests; keys name them."""
    n_in, n_out = len(inside), len(outside)
    above_in, above_out = _rates(inside, thresholds), _rates(outside, thresholds)
    out: dict[str, np.ndarray] = {}
    for side, k_in, k_out in (("≥", above_in, above_out), ("<", n_in - above_in, n_out - above_out)):
        in_low, in_high = clopper_pearson(k_in, n_in, confidence)
        out_low, out_high = clopper_pearson(k_out, n_out, confidence)
        for order, low, high in (("in/out", in_low, out_high), ("out/in", out_low, in_high)):
            with np.errstate(divide="ignore", invalid="ignore"):
                eps = np.log(np.maximum(low - delta, 0.0) / high)
            out[f"{side} {order}"] = np.where(np.isfinite(eps), np.maximum(eps, 0.0), 0.0)
    return out


def epsilon_lower_bound(
    inside: np.ndarray,
    outside: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    select: float = 0.2,
) -> dict[str, Any]:
    """The audit's ε lower bound from scores of runs with the canary in and out (each an iid sample).

    The first ``select`` share of each arm picks the test; the rest bounds it. Returns the bound, the
    chosen threshold and test, the rates measured on the held-out runs, and their counts."""
    inside, outside = np.asarray(inside, np.float64), np.asarray(outside, np.float64)
    cut_in, cut_out = int(len(inside) * select), int(len(outside) * select)
    if min(cut_in, cut_out, len(inside) - cut_in, len(outside) - cut_out) < 1:
        raise ValueError("each arm needs runs both to select the test and to bound it")
    pooled = np.concatenate([inside[:cut_in], outside[:cut_out]])
    thresholds = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, CANDIDATES)))
    thresholds = np.concatenate([thresholds, [np.nextafter(pooled.max(), np.inf)]])
    chosen = _bounds(inside[:cut_in], outside[:cut_out], thresholds, delta, confidence)
    test, index = max(
        ((name, int(np.argmax(v))) for name, v in chosen.items()), key=lambda p: chosen[p[0]][p[1]]
    )
    threshold = thresholds[index : index + 1]
    held_in, held_out = inside[cut_in:], outside[cut_out:]
    bound = float(_bounds(held_in, held_out, threshold, delta, confidence)[test][0])
    above_in, above_out = int(_rates(held_in, threshold)[0]), int(_rates(held_out, threshold)[0])
    if test.startswith("<"):
        above_in, above_out = len(held_in) - above_in, len(held_out) - above_out
    return {
        "epsilon_lower": bound,
        "test": f"score {test.split()[0]} {threshold[0]:.4g}, {test.split()[1]}",
        "threshold": float(threshold[0]),
        "in_rate": above_in / len(held_in),
        "out_rate": above_out / len(held_out),
        "held_out": [len(held_in), len(held_out)],
        "selection_bound": float(chosen[test][index]),
    }


def log_ratio_cap(runs: int, confidence: float = 0.95) -> float:
    """The largest bound ``runs`` held-out runs an arm can give (a perfect test): log(1 / Q_high(0))."""
    low = ((1.0 - confidence) / 2) ** (1.0 / runs)
    return math.log(low / (1.0 - low))
