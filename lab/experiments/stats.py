"""Medians over seeds, with runs that miss the target counted at their cap (right-censored), not dropped.

Dropping a run that never reached 80% from a median flatters whichever strategy fails most. Here a
missed run counts as its cap (the budget it was given) and is marked: the median is a lower bound
("≥") whenever a censored run sits at or below it, and a value derived from a censored run (a saving,
a ratio) is marked too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def median_range(values: Sequence[float]) -> dict[str, Any]:
    """Median and range of values that always exist (accuracies, shares)."""
    present = [float(v) for v in values]
    return {"median": float(np.median(present)), "min": min(present), "max": max(present), "censored": 0}


def censored_range(values: Sequence[float | None], caps: float | Sequence[float]) -> dict[str, Any]:
    """Median and range over seeds, a missing value counted as its cap (marked censored)."""
    cap_list = [float(caps)] * len(values) if isinstance(caps, int | float) else [float(c) for c in caps]
    filled = [float(v) if v is not None else c for v, c in zip(values, cap_list, strict=True)]
    mask = [v is None for v in values]
    summary = _summary(filled, mask)
    # a censored value at or below the median makes the median a lower bound
    lower_bound = any(m and v <= summary["median"] for v, m in zip(filled, mask, strict=True))
    summary["median_mark"] = "≥" if lower_bound else ""
    return summary


def paired(
    base: Sequence[float | None],
    other: Sequence[float | None],
    base_caps: float | Sequence[float],
    other_caps: float | Sequence[float],
    combine: Callable[[float, float], float],
) -> dict[str, Any]:
    """``combine(base, other)`` per seed on censored-filled values; a seed with a censored side is marked."""
    n = len(base)
    bc = [float(base_caps)] * n if isinstance(base_caps, int | float) else list(base_caps)
    oc = [float(other_caps)] * n if isinstance(other_caps, int | float) else list(other_caps)
    values, mask = [], []
    for b, o, cb, co in zip(base, other, bc, oc, strict=True):
        values.append(combine(cb if b is None else float(b), co if o is None else float(o)))
        mask.append(b is None or o is None)
    summary = _summary(values, mask)
    summary["median_mark"] = "~" if any(mask) else ""  # a derived bound can go either way: uncertain
    return summary


def saving(base: float, other: float) -> float:
    """Saving of ``other`` over ``base`` in % (positive: ``other`` needed less)."""
    return 100.0 * (base - other) / base


def ratio(base: float, other: float) -> float:
    """``other / base``."""
    return other / base


def _summary(values: list[float], mask: list[bool]) -> dict[str, Any]:
    median = float(np.median(values))
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "censored": sum(mask),
        "per_seed": values,
        "per_seed_censored": mask,
    }
