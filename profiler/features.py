"""Device features I-Prof reads (fleet-spec.md section 4) and their conversion to arrays."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ENERGY_FEATURES", "FEATURES", "FeatureRows", "as_matrix"]

#: Features of the time predictor, in column order (all readable on a stock Android phone).
FEATURES: tuple[str, ...] = ("available_memory", "total_memory", "temperature", "cpu_freq_sum")
#: Features of the energy predictor: the time features plus the energy per non-idle CPU second.
ENERGY_FEATURES: tuple[str, ...] = (*FEATURES, "energy_per_cpu_time")

FeatureRows = Sequence[Mapping[str, Any]] | np.ndarray


def as_matrix(rows: FeatureRows, names: Sequence[str] = ENERGY_FEATURES) -> np.ndarray:
    """Turn feature dicts (or an array) into a float matrix, NaN marking a missing value to impute.

    A 2D array must have its columns in ``ENERGY_FEATURES`` order; it may stop after any prefix of it
    (e.g. the four ``FEATURES``), the absent columns being missing.
    """
    if isinstance(rows, np.ndarray) or (len(rows) > 0 and not isinstance(rows[0], Mapping)):
        arr = np.array(rows, dtype=object)
        if arr.ndim != 2:
            raise ValueError(f"features must be a list of dicts or a 2D array, got shape {arr.shape}")
        arr = np.where(np.equal(arr, None), np.nan, arr).astype(np.float64)
        if arr.shape[1] < len(names):
            pad = np.full((arr.shape[0], len(names) - arr.shape[1]), np.nan)
            arr = np.hstack([arr, pad])
        return np.ascontiguousarray(arr[:, : len(names)])
    out = np.full((len(rows), len(names)), np.nan)
    for i, row in enumerate(rows):
        for j, name in enumerate(names):
            value = row.get(name)
            if value is not None:
                out[i, j] = float(value)
    return out


def row_values(features: Mapping[str, Any], names: Sequence[str]) -> list[float | None]:
    """Read one request's features in column order, None (or NaN) meaning unreadable on that device."""
    out: list[float | None] = []
    for name in names:
        value = features.get(name)
        if value is None:
            out.append(None)
        else:
            value = float(value)
            out.append(None if math.isnan(value) else value)
    return out
