"""Label-distribution similarity used by AdaSGD's boost and the controller's threshold."""

from __future__ import annotations

import numpy as np


def normalise(counts: np.ndarray) -> np.ndarray:
    """Counts → a probability vector (all zeros stays all zeros)."""
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    return counts / total if total > 0 else counts


def bhattacharyya(p: np.ndarray, q: np.ndarray) -> float:
    """BC(p, q) = Σ_k sqrt(p_k q_k) of two label distributions (given as counts or probabilities)."""
    value = float(np.sqrt(normalise(p) * normalise(q)).sum())
    return min(1.0, max(0.0, value))
