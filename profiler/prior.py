"""Built-in prior: the cold start of a fresh server that has no offline bootstrap dataset.

The rows span the feature ranges of common Android phones (low-end to flagship), so the scaler is
sensible; every row carries the same prior slope, so the prior cold-start model predicts that
constant for every device until measurements arrive (personal models then learn the device's own
slope, and periodic cold-start refits learn how α depends on the features). A high prior is the safe
side: it gives small mini-batches, within the SLO, until the first measurements come back.
"""

from __future__ import annotations

import numpy as np

from profiler.features import ENERGY_FEATURES

__all__ = ["PRIOR_DEVICES", "prior_dataset"]

_GB = 1024**3

#: Representative devices: columns are ENERGY_FEATURES (bytes, bytes, °C, MHz, % battery per CPU second).
PRIOR_DEVICES: dict[str, tuple[float, float, float, float, float]] = {
    "low-end 2GB quad-core": (0.6 * _GB, 2 * _GB, 38.0, 4 * 1400.0, 0.012),
    "Galaxy S6-class": (1.2 * _GB, 3 * _GB, 36.0, 4 * 2100.0 + 4 * 1500.0, 0.009),
    "Galaxy S7-class": (1.6 * _GB, 4 * _GB, 34.0, 4 * 2300.0 + 4 * 1600.0, 0.008),
    "mid-range 4GB octa-core": (1.4 * _GB, 4 * _GB, 40.0, 2 * 2000.0 + 6 * 1800.0, 0.007),
    "Pixel 3-class": (2.0 * _GB, 4 * _GB, 33.0, 4 * 2500.0 + 4 * 1600.0, 0.006),
    "Galaxy S10-class": (3.5 * _GB, 8 * _GB, 32.0, 2 * 2730.0 + 2 * 2310.0 + 4 * 1950.0, 0.005),
    "flagship 12GB": (6.0 * _GB, 12 * _GB, 30.0, 2840.0 + 3 * 2420.0 + 4 * 1800.0, 0.004),
    "hot throttled phone": (1.0 * _GB, 4 * _GB, 45.0, 4 * 2000.0 + 4 * 1500.0, 0.010),
}


def prior_dataset(time_slope_ms: float, energy_slope: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features in ENERGY_FEATURES order, constant time slopes, constant energy slopes) of the prior."""
    x = np.array(list(PRIOR_DEVICES.values()), dtype=np.float64)
    assert x.shape[1] == len(ENERGY_FEATURES)
    n = x.shape[0]
    return x, np.full(n, float(time_slope_ms)), np.full(n, float(energy_slope))
