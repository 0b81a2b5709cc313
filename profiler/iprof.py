"""I-Prof: the largest mini-batch that keeps a learning task within its time and energy SLOs.

Cost is linear in the mini-batch size L (t = t0 + α·L); a time and an energy ``SlopeRegressor``
predict α per device model and request, and L = max(1, (SLO − t0)/α̂), the smaller of the time and
energy bounds, clamped to [min_batch, max_batch] (fleet-spec.md section 4; with t0 = 0 this is the
spec's L = max(1, SLO/α̂)).

Cold start: ``fit`` (or ``load_bootstrap``) from an offline dataset of (features, α) pairs. An IProf
that was never fitted cold-starts itself on first use from the built-in prior (``profiler.prior``):
a constant slope ``prior_time_slope_ms`` (``prior_energy_slope``) for every device, with the scaler
fitted on representative phones; each device model's personal model then learns from its first
measurement on.
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

from profiler.features import ENERGY_FEATURES, FEATURES, FeatureRows, as_matrix, row_values
from profiler.prior import prior_dataset
from profiler.slope import SlopeRegressor
from server.core.ports import BatchDecision  # the one decision type, owned by the core's port

__all__ = ["BatchDecision", "IProf"]

STATE_VERSION = 1


class IProf(BaseEstimator):
    """Per-device-model mini-batch sizing to a time SLO (ms per task) and an energy SLO (% battery per task).

    Parameters
    ----------
    time_slo_ms : computation time a task may take, in milliseconds.
    energy_slo : battery a task may use, in percent of capacity; None = no energy SLO.
    min_batch, max_batch : the configured clamp [L_min, L_max].
    C : PA-I aggressiveness cap of both personal models (the thesis uses 0.1).
    time_epsilon : ε of the time model, in ms per sample.
    energy_epsilon : ε of the energy model, in % battery per sample.
    intercept_ms : fixed time cost of a task, t = intercept_ms + α·L (the released code used 100 ms).
    energy_intercept : fixed energy cost of a task, in % battery.
    prior_time_slope_ms, prior_energy_slope : the built-in cold start when no bootstrap data was loaded.
    alpha_floor_fraction : α̂ is floored at this fraction of the smallest positive training slope.
    refit_every : re-train the cold-start models every this many observations (0 = never).
    max_pairs : observed pairs kept per predictor for those refits.
    scale_target : see ``SlopeRegressor``.
    relative_memory : feed available memory as a fraction of total memory (memory pressure). Raw
        bytes mostly encode the phone class, which total memory already gives; within one phone they
        fluctuate by hundreds of MB, and the cold start's between-phone coefficient then turns that
        noise into large slope swings (measured in docs/results/profiler-time.md).
    personal_init : see ``SlopeRegressor`` ("level" starts a personal model from the cold start's
        prediction alone).
    z_clip : see ``SlopeRegressor`` (clip standardised features to ±z_clip).
    scale_floor : see ``SlopeRegressor`` (standardise by at least this fraction of a feature's mean).
    """

    def __init__(
        self,
        time_slo_ms: float = 3000.0,
        energy_slo: float | None = None,
        min_batch: int = 1,
        max_batch: int = 10_000,
        C: float = 0.1,
        time_epsilon: float = 0.1,
        energy_epsilon: float = 6e-5,
        intercept_ms: float = 0.0,
        energy_intercept: float = 0.0,
        prior_time_slope_ms: float = 20.0,
        prior_energy_slope: float = 5e-4,
        alpha_floor_fraction: float = 0.1,
        refit_every: int = 1000,
        max_pairs: int = 10_000,
        scale_target: bool = True,
        relative_memory: bool = False,
        personal_init: str = "cold",
        z_clip: float | None = None,
        scale_floor: float | None = None,
    ) -> None:
        self.time_slo_ms = time_slo_ms
        self.energy_slo = energy_slo
        self.min_batch = min_batch
        self.max_batch = max_batch
        self.C = C
        self.time_epsilon = time_epsilon
        self.energy_epsilon = energy_epsilon
        self.intercept_ms = intercept_ms
        self.energy_intercept = energy_intercept
        self.prior_time_slope_ms = prior_time_slope_ms
        self.prior_energy_slope = prior_energy_slope
        self.alpha_floor_fraction = alpha_floor_fraction
        self.refit_every = refit_every
        self.max_pairs = max_pairs
        self.scale_target = scale_target
        self.relative_memory = relative_memory
        self.personal_init = personal_init
        self.z_clip = z_clip
        self.scale_floor = scale_floor

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        features: FeatureRows,
        time_slopes: Sequence[float] | np.ndarray,
        energy_slopes: Sequence[float | None] | np.ndarray | None = None,
    ) -> IProf:
        """Cold start from an offline dataset of (features, α) pairs; missing energy slopes use the prior.

        ``features`` is a list of feature dicts or a 2D array with ENERGY_FEATURES columns (a prefix
        of them is allowed when there are no energy slopes). Rows whose energy slope is None/NaN only
        train the time model. Refitting forgets every personal model.
        """
        self._validate_hyperparameters()
        x = as_matrix(features, ENERGY_FEATURES)
        if self.relative_memory:
            x[:, 0] = x[:, 0] / x[:, 1]
        t = np.asarray(time_slopes, dtype=np.float64)
        if t.shape != (x.shape[0],):
            raise ValueError(f"{x.shape[0]} feature rows but time_slopes has shape {t.shape}")
        self.time_ = self._slope_regressor(self.time_epsilon).fit(x[:, : len(FEATURES)], t)
        e = None if energy_slopes is None else np.array(energy_slopes, dtype=object)
        if e is not None:
            e = np.where(np.equal(e, None), np.nan, e).astype(np.float64)
            if e.shape != (x.shape[0],):
                raise ValueError(f"{x.shape[0]} feature rows but energy_slopes has shape {e.shape}")
        if e is None or not np.isfinite(e).any():
            px, _, pe = prior_dataset(self.prior_time_slope_ms, self.prior_energy_slope)
            self.energy_ = self._slope_regressor(self.energy_epsilon).fit(px, pe)
        else:
            keep = np.isfinite(e)
            self.energy_ = self._slope_regressor(self.energy_epsilon).fit(x[keep], e[keep])
        self.n_observed_ = 0
        return self

    def fit_prior(self) -> IProf:
        """Cold start from the built-in prior (constant slopes over representative phones)."""
        x, t, e = prior_dataset(self.prior_time_slope_ms, self.prior_energy_slope)
        return self.fit(x, t, e)

    def load_bootstrap(self, path: str | Path) -> IProf:
        """Fit from an offline bootstrap file (.csv with a header, or .npz), one row per (device, state).

        Columns: device_model, the ENERGY_FEATURES names, time_slope_ms and optionally energy_slope;
        an empty cell (CSV) or NaN is a missing value. device_model is informative only: the cold start
        is for device models never seen.
        """
        path = Path(path)
        columns = [*ENERGY_FEATURES, "time_slope_ms", "energy_slope"]
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                n = len(data["time_slope_ms"])
                cols = {
                    c: np.asarray(data[c], dtype=np.float64) if c in data else np.full(n, np.nan)
                    for c in columns
                }
        elif path.suffix == ".csv":
            with path.open(newline="") as fh:
                rows = list(csv.DictReader(fh))
            cols = {c: np.array([_cell(r.get(c)) for r in rows], dtype=np.float64) for c in columns}
        else:
            raise ValueError(f"bootstrap file must be .csv or .npz, got {path.name}")
        x = np.column_stack([cols[c] for c in ENERGY_FEATURES])
        energy = cols["energy_slope"] if np.isfinite(cols["energy_slope"]).any() else None
        return self.fit(x, cols["time_slope_ms"], energy)

    def refit_cold_start(self) -> IProf:
        """Re-train both cold-start models with the pairs observed so far (personal models unchanged)."""
        check_is_fitted(self)
        self.time_.refit_cold_start()
        self.energy_.refit_cold_start()
        return self

    # ------------------------------------------------------------------ serving
    def batch_size(self, device_model: str, features: Mapping[str, Any]) -> BatchDecision:
        """The mini-batch bound L for this device model in this state (hot path: no sklearn validation)."""
        self._ensure_fitted()
        values = self._values(features)
        alpha_t, personal = self.time_.predict_one(values[: len(FEATURES)], device_model)
        alpha_e, _ = self.energy_.predict_one(values, device_model)
        time_bound = max(1.0, (self.time_slo_ms - self.intercept_ms) / alpha_t)
        bound = time_bound
        energy_bound = None
        if self.energy_slo is not None:
            energy_bound = max(1.0, (self.energy_slo - self.energy_intercept) / alpha_e)
            bound = min(bound, energy_bound)
        size = min(max(int(math.floor(bound)), self.min_batch), self.max_batch)
        return BatchDecision(
            batch_size=size,
            time_bound=time_bound,
            energy_bound=energy_bound,
            predicted_time_ms=self.intercept_ms + alpha_t * size,
            predicted_energy=self.energy_intercept + alpha_e * size,
            source="personal" if personal else "cold",
        )

    def observe(
        self,
        device_model: str,
        features: Mapping[str, Any],
        batch_size: int,
        time_ms: float,
        energy: float | None = None,
    ) -> IProf:
        """Learn from a finished task: α = (time_ms − intercept_ms)/L, and (energy − energy_intercept)/L.

        ``features`` should be the ones the device sent with its task request (the state the task ran in).
        """
        self._ensure_fitted()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not math.isfinite(time_ms):
            raise ValueError(f"time_ms must be finite, got {time_ms}")
        values = self._values(features)
        self.time_.observe_one(
            values[: len(FEATURES)], (time_ms - self.intercept_ms) / batch_size, device_model
        )
        if energy is not None and math.isfinite(energy):
            self.energy_.observe_one(values, (energy - self.energy_intercept) / batch_size, device_model)
        self.n_observed_ += 1
        if self.refit_every and self.n_observed_ % self.refit_every == 0:
            self.refit_cold_start()
        return self

    def device_models(self) -> list[str]:
        """Device models that have a personalised model."""
        check_is_fitted(self)
        return sorted(set(self.time_.models_) | set(self.energy_.models_))

    # -------------------------------------------------------------- persistence
    def cold_state(self) -> dict[str, Any]:
        """JSON-serialisable cold-start part (both predictors) and the observation counter."""
        check_is_fitted(self)
        return {
            "time": self.time_.cold_state(),
            "energy": self.energy_.cold_state(),
            "n_observed": self.n_observed_,
        }

    def load_cold_state(self, state: Mapping[str, Any]) -> IProf:
        """Restore the cold-start part; every personal model is dropped (load them with load_device_state)."""
        self._validate_hyperparameters()
        self.time_ = self._slope_regressor(self.time_epsilon).load_cold_state(state["time"])
        self.energy_ = self._slope_regressor(self.energy_epsilon).load_cold_state(state["energy"])
        self.n_observed_ = int(state["n_observed"])
        return self

    def device_state(self, device_model: str) -> dict[str, Any]:
        """JSON-serialisable personal models (coefficients, update counts) of one device model."""
        check_is_fitted(self)
        return {
            "time": self.time_.device_state(device_model),
            "energy": self.energy_.device_state(device_model),
        }

    def load_device_state(self, device_model: str, state: Mapping[str, Any]) -> IProf:
        """Restore one device model's personal models saved by ``device_state``."""
        check_is_fitted(self)
        self.time_.load_device_state(device_model, state.get("time"))
        self.energy_.load_device_state(device_model, state.get("energy"))
        return self

    def state_dict(self) -> dict[str, Any]:
        """Everything, JSON-serialisable: hyperparameters, cold-start part and every device model."""
        check_is_fitted(self)
        return {
            "version": STATE_VERSION,
            "params": self.get_params(),
            "cold": self.cold_state(),
            "devices": {dm: self.device_state(dm) for dm in self.device_models()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> IProf:
        """Restore a ``state_dict`` into this instance (its hyperparameters are taken from the state)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported I-Prof state version {state.get('version')!r}")
        self.set_params(**state["params"])
        self.load_cold_state(state["cold"])
        for dm, dev in state["devices"].items():
            self.load_device_state(dm, dev)
        return self

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> IProf:
        """A new IProf restored from ``state_dict()``."""
        return cls().load_state_dict(state)

    # ------------------------------------------------------------------ private
    def _slope_regressor(self, epsilon: float) -> SlopeRegressor:
        """A predictor sharing this profiler's hyperparameters."""
        return SlopeRegressor(
            C=self.C,
            epsilon=epsilon,
            alpha_floor_fraction=self.alpha_floor_fraction,
            scale_target=self.scale_target,
            max_pairs=self.max_pairs,
            personal_init=self.personal_init,
            z_clip=self.z_clip,
            scale_floor=self.scale_floor,
        )

    def _values(self, features: Mapping[str, Any]) -> list[float | None]:
        """One request's feature values in column order, memory made relative if configured."""
        values = row_values(features, ENERGY_FEATURES)
        if self.relative_memory:
            available, total = values[0], values[1]
            values[0] = None if available is None or not total else available / total
        return values

    def _ensure_fitted(self) -> None:
        """A fresh server works: cold-start from the built-in prior on first use."""
        if not hasattr(self, "time_"):
            self.fit_prior()

    def _validate_hyperparameters(self) -> None:
        """Check the settings when fitting, never in __init__ (estimator contract)."""
        if not 1 <= self.min_batch <= self.max_batch:
            raise ValueError(f"need 1 <= min_batch <= max_batch, got [{self.min_batch}, {self.max_batch}]")
        if not self.time_slo_ms > self.intercept_ms:
            raise ValueError("time_slo_ms must exceed intercept_ms")
        if self.energy_slo is not None and not self.energy_slo > self.energy_intercept:
            raise ValueError("energy_slo must exceed energy_intercept")
        if not (self.prior_time_slope_ms > 0 and self.prior_energy_slope > 0):
            raise ValueError("prior slopes must be > 0")
        if self.refit_every < 0:
            raise ValueError(f"refit_every must be >= 0, got {self.refit_every}")


def _cell(value: str | None) -> float:
    """A CSV cell as float, an empty or absent cell as NaN."""
    return float("nan") if value is None or value.strip() == "" else float(value)
