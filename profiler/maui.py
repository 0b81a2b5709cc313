"""MAUI's profiler, the baseline I-Prof is compared with: one global linear model of cost on batch size.

MAUI (Cuervo et al., MobiSys 2010) predicts a task's cost from the amount of work alone: here
t̂ = θ_t·L and ê = θ_e·L, one θ for every device (no device features, no personalisation), fitted by
least squares through the origin on every (L, t) pair seen so far. The sufficient statistics ΣL² and
ΣL·t make ``partial_fit`` an exact, O(1) update of that regression. Batch sizing is I-Prof's rule with
these predictions, L = SLO/θ̂ clamped to [min_batch, max_batch], so the comparison isolates the model.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from server.core.ports import BatchDecision

__all__ = ["MauiProfiler"]


class MauiProfiler(BaseEstimator):
    """Global time (and energy) per sample by least squares through the origin on batch size alone.

    Parameters
    ----------
    time_slo_ms, energy_slo, min_batch, max_batch : as for ``IProf``.
    """

    def __init__(
        self,
        time_slo_ms: float = 3000.0,
        energy_slo: float | None = None,
        min_batch: int = 1,
        max_batch: int = 10_000,
    ) -> None:
        self.time_slo_ms = time_slo_ms
        self.energy_slo = energy_slo
        self.min_batch = min_batch
        self.max_batch = max_batch

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        batch_sizes: Sequence[float] | np.ndarray,
        times_ms: Sequence[float] | np.ndarray,
        energies: Sequence[float | None] | np.ndarray | None = None,
    ) -> MauiProfiler:
        """Fit θ_t (and θ_e on the rows with an energy) from scratch."""
        if not 1 <= self.min_batch <= self.max_batch:
            raise ValueError(f"need 1 <= min_batch <= max_batch, got [{self.min_batch}, {self.max_batch}]")
        lengths = np.asarray(batch_sizes, dtype=np.float64)
        times = np.asarray(times_ms, dtype=np.float64)
        if lengths.shape != times.shape or lengths.ndim != 1 or lengths.size == 0:
            raise ValueError("batch_sizes and times_ms must be non-empty 1D arrays of the same length")
        if (lengths <= 0).any():
            raise ValueError("batch sizes must be positive")
        self.sum_ll_t_ = float(lengths @ lengths)
        self.sum_lt_ = float(lengths @ times)
        self.sum_ll_e_ = 0.0
        self.sum_le_ = 0.0
        if energies is not None:
            e = np.array(energies, dtype=object)
            e = np.where(np.equal(e, None), np.nan, e).astype(np.float64)
            keep = np.isfinite(e)
            self.sum_ll_e_ = float(lengths[keep] @ lengths[keep])
            self.sum_le_ = float(lengths[keep] @ e[keep])
        self.n_observed_ = 0
        return self

    def partial_fit(self, batch_size: float, time_ms: float, energy: float | None = None) -> MauiProfiler:
        """Add one measurement to the global regression (exact recursive least squares)."""
        check_is_fitted(self)
        self.sum_ll_t_ += batch_size * batch_size
        self.sum_lt_ += batch_size * time_ms
        if energy is not None and math.isfinite(energy):
            self.sum_ll_e_ += batch_size * batch_size
            self.sum_le_ += batch_size * energy
        self.n_observed_ += 1
        return self

    def load_bootstrap(self, path: str | Path) -> MauiProfiler:
        """Fit on the (batch_size, time_ms, energy) columns of a bootstrap CSV (``sim.bootstrap``)."""
        with Path(path).open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        if not rows or "batch_size" not in rows[0] or "time_ms" not in rows[0]:
            raise ValueError(f"{path}: needs batch_size and time_ms columns")
        energy = [float(r["energy"]) if r.get("energy", "").strip() else None for r in rows]
        return self.fit(
            [float(r["batch_size"]) for r in rows],
            [float(r["time_ms"]) for r in rows],
            energy if any(e is not None for e in energy) else None,
        )

    # ------------------------------------------------------------------ predicting
    @property
    def time_slope_(self) -> float:
        """θ_t, ms per sample for every device."""
        return self.sum_lt_ / self.sum_ll_t_

    @property
    def energy_slope_(self) -> float | None:
        """θ_e, % battery per sample for every device (None without energy data)."""
        return self.sum_le_ / self.sum_ll_e_ if self.sum_ll_e_ > 0 else None

    def predict(self, batch_sizes: Sequence[float] | np.ndarray) -> np.ndarray:
        """Predicted times (ms) of tasks of these sizes, the same on every device."""
        check_is_fitted(self)
        return self.time_slope_ * np.asarray(batch_sizes, dtype=np.float64)

    def batch_size(self, device_model: str, features: Mapping[str, Any]) -> BatchDecision:
        """L = SLO / θ̂ (the smaller of the time and energy bounds), clamped; ignores device and features."""
        check_is_fitted(self)
        alpha_t = max(self.time_slope_, 1e-9)
        time_bound = max(1.0, self.time_slo_ms / alpha_t)
        bound, energy_bound = time_bound, None
        alpha_e = self.energy_slope_
        if self.energy_slo is not None and alpha_e is not None:
            energy_bound = max(1.0, self.energy_slo / max(alpha_e, 1e-12))
            bound = min(bound, energy_bound)
        size = min(max(int(math.floor(bound)), self.min_batch), self.max_batch)
        return BatchDecision(
            batch_size=size,
            time_bound=time_bound,
            energy_bound=energy_bound,
            predicted_time_ms=alpha_t * size,
            predicted_energy=(alpha_e or 0.0) * size,
            source="maui",
        )

    def observe(
        self,
        device_model: str,
        features: Mapping[str, Any],
        batch_size: int,
        time_ms: float,
        energy: float | None = None,
    ) -> MauiProfiler:
        """Learn from a finished task (the same call signature as ``IProf.observe``)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        return self.partial_fit(float(batch_size), float(time_ms), energy)

    # ------------------------------------------------------------------ the Profiler port's persistence
    def device_models(self) -> list[str]:
        """None: MAUI has one global model and no per-device state."""
        return []

    def device_state(self, device_model: str) -> dict[str, Any]:
        return {}

    def load_device_state(self, device_model: str, state: Mapping[str, Any]) -> MauiProfiler:
        return self

    def cold_state(self) -> dict[str, Any]:
        """The regression's sufficient statistics."""
        check_is_fitted(self)
        keys = ("sum_ll_t_", "sum_lt_", "sum_ll_e_", "sum_le_", "n_observed_")
        return {k: getattr(self, k) for k in keys}

    def load_cold_state(self, state: Mapping[str, Any]) -> MauiProfiler:
        for key, value in state.items():
            setattr(self, key, value)
        return self
