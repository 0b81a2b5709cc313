"""Per-device-model slope regressor: cold-start OLS plus passive-aggressive personalisation (I-Prof).

The slope α is the cost of one sample (ms per sample for time, % battery per sample for energy).
Features are standardised with the bootstrap data's mean and spread, and a missing value (NaN) is
imputed with that mean, i.e. 0 in standardised space.

The personalised models are scikit-learn's PA-I (``SGDRegressor(loss="epsilon_insensitive",
penalty=None, learning_rate="pa1", eta0=C)``) on the augmented input ``x = [1, z]`` with
``fit_intercept=False``: the bias is a coefficient like the others, so the update is exactly the
spec's ``θ ← θ + min(C, loss/‖x‖²)·sign(α − xᵀθ)·x`` (sklearn's own intercept would take a step
that ignores the bias in ‖x‖², overshooting the ε-tube, and would skip a device whose standardised
features are all 0, e.g. all unreadable). With ``scale_target=True`` the PA model learns α divided
by ``y_scale_`` (the mean |α| of the bootstrap data), and ε is divided likewise, so that C caps a
step in units of a typical slope for both the time (ms) and the energy (% battery) predictor.

On the request path one row is applied with ``pa1_step``, the same arithmetic as the estimator's
``partial_fit`` (a test checks they agree to the bit): sklearn spends ~1 ms re-validating a one-row
input, the update itself takes microseconds, and the profiler's update budget is 1 ms p99.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.linear_model import LinearRegression, SGDRegressor
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted, validate_data

from profiler.slope_state import SlopeState

__all__ = ["SlopeRegressor", "pa1_step"]


def pa1_step(coef: np.ndarray, x: np.ndarray, y: float, C: float, epsilon: float) -> None:
    """One PA-I step in place: ``coef += min(C, loss/‖x‖²)·sign(y − coefᵀx)·x``, ε-insensitive loss."""
    err = y - float(coef @ x)
    loss = abs(err) - epsilon
    if loss > 0.0:
        coef += math.copysign(min(C, loss / float(x @ x)), err) * x


def _augment(z: np.ndarray) -> np.ndarray:
    """Prepend the constant 1 so the bias is part of θ and of ‖x‖² (the PA rule as specified)."""
    return np.ascontiguousarray(np.hstack([np.ones((z.shape[0], 1)), z]))


class SlopeRegressor(SlopeState, RegressorMixin, BaseEstimator):
    """Predict a per-sample cost slope α from device features, personalised per device model.

    Parameters
    ----------
    C : PA-I aggressiveness cap (``eta0`` of the SGDRegressor), in units of ``y_scale_``.
    epsilon : width of the ε-insensitive tube, in the units of α (e.g. ms per sample).
    alpha_floor_fraction : predictions are floored at this fraction of the smallest positive
        training slope (guards α̂ ≤ 0); a personal model's floor also goes down to this fraction of
        the smallest slope its device model measured, so a device faster than all the training data
        (or than the built-in prior's constant) is not held back by a floor it has already disproved.
    scale_target : learn α / mean|α_boot| in the PA models (see module docstring); False gives the
        literal PA-I on raw α.
    max_pairs : how many observed (features, α) pairs to keep for ``refit_cold_start``.
    personal_init : how a device model's personal model starts at its first measurement. "cold":
        the cold-start coefficients. "level": the cold start's prediction for that request as the
        bias, feature coefficients 0, so the PA updates learn the device's own sensitivities. The
        cold start's coefficients are between-phone ones (fast phones have more memory and run
        hotter); inside one phone they turn fluctuations of temperature and free memory into slope
        noise (simulated p90 |t − SLO| 0.85 s with "cold", 0.55 s with "level").
    scale_floor : standardise each feature by at least this fraction of its bootstrap mean (None:
        the bootstrap's spread alone). A short bootstrap (the live one: a few seconds per set-up)
        sees free memory vary by 0.1%; in use it varies by several percent, which the raw spread
        would turn into ±10 σ swings that the PA updates then chase.
    z_clip : clip standardised features to ±z_clip (None: no clipping). A feature far outside the
        bootstrap's range (a small bootstrap, a new kind of phone, a hot phone when the bootstrap
        ran cool) would otherwise take over the linear model and swing its predictions.
    """

    def __init__(
        self,
        C: float = 0.1,
        epsilon: float = 0.1,
        alpha_floor_fraction: float = 0.1,
        scale_target: bool = True,
        max_pairs: int = 10_000,
        personal_init: str = "cold",
        z_clip: float | None = None,
        scale_floor: float | None = None,
    ) -> None:
        self.C = C
        self.epsilon = epsilon
        self.alpha_floor_fraction = alpha_floor_fraction
        self.scale_target = scale_target
        self.max_pairs = max_pairs
        self.personal_init = personal_init
        self.z_clip = z_clip
        self.scale_floor = scale_floor

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any) -> SlopeRegressor:
        """Cold start: standardise the features and fit OLS (features → α); forget every personal model."""
        self._validate_hyperparameters()
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan", y_numeric=True, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("slopes must be finite")
        empty = np.all(np.isnan(X), axis=0)
        if empty.any():
            raise ValueError(
                f"feature columns {np.flatnonzero(empty).tolist()} have no values to standardise"
            )
        positive = y[y > 0]
        if positive.size == 0:
            raise ValueError("the bootstrap data has no positive slope to learn the floor from")
        self.scaler_ = StandardScaler().fit(X)
        if self.scale_floor is not None:
            # a feature nearly constant in the bootstrap would be blown up by its tiny spread
            floor = self.scale_floor * np.abs(self.scaler_.mean_)
            self.scaler_.scale_ = np.maximum(self.scaler_.scale_, np.where(floor > 0, floor, 1.0))
        z = self._standardise(X)
        self.y_scale_ = float(np.mean(np.abs(y))) if self.scale_target else 1.0
        self.alpha_floor_ = float(self.alpha_floor_fraction * positive.min())
        self.boot_z_ = z
        self.boot_y_ = np.asarray(y, dtype=np.float64).copy()
        self.pairs_ = deque(maxlen=self.max_pairs)
        self.models_ = {}
        self.n_updates_ = {}
        self.min_alpha_ = {}
        self._fit_cold(z, self.boot_y_)
        self._reset_sums()
        self._make_template()
        self._fast_personal: dict[str, list[float]] = {}
        return self

    def partial_fit(self, X: Any, y: Any, *, device_model: str) -> SlopeRegressor:
        """PA-update ``device_model``'s model with each (x, α) in order (bootstrapped from the cold start)."""
        check_is_fitted(self)
        X, y = validate_data(
            self, X, y, ensure_all_finite="allow-nan", y_numeric=True, dtype=np.float64, reset=False
        )
        return self._partial_fit_z(self._standardise(X), y, device_model)

    def refit_cold_start(self) -> SlopeRegressor:
        """Re-train the cold-start OLS on the bootstrap data plus the observed pairs (scaler kept fixed).

        Amortised: every observation already added its row to the normal equations (and an evicted
        pair took its row out), so a refit solves one (d+1)×(d+1) system, tens of microseconds, and
        can run inline under the coordinator's lock (an ``lstsq`` over 10,000 pairs took 40-90 ms).
        Personal models are left as they are (their coefficients live in the same standardised
        space); the floor is re-learned from all pairs, so it can only go down as faster devices
        are seen.
        """
        check_is_fitted(self)
        if not self.pairs_:
            return self
        # the least-squares solution of [1, z]·θ = y (lstsq: also the minimum-norm one when singular)
        theta = np.linalg.lstsq(self._gram, self._moment, rcond=None)[0]
        cold = LinearRegression()
        cold.coef_, cold.intercept_, cold.n_features_in_ = theta[1:].copy(), float(theta[0]), theta.size - 1
        self.cold_ = cold
        self._set_cold_theta()
        if self._min_positive < math.inf:
            self.alpha_floor_ = min(self.alpha_floor_, float(self.alpha_floor_fraction * self._min_positive))
        return self

    # --------------------------------------------------------------- predicting
    def predict(self, X: Any, *, device_model: str | None = None) -> np.ndarray:
        """Predict α (floored at ``alpha_floor_``) by the device model's own model, else the cold start."""
        check_is_fitted(self)
        X = validate_data(self, X, ensure_all_finite="allow-nan", dtype=np.float64, reset=False)
        z = _augment(self._standardise(X))
        theta = np.asarray(self._theta(device_model))
        return np.maximum(self.y_scale_ * (z @ theta), self._floor(device_model))

    def predict_one(self, values: list[float | None], device_model: str | None) -> tuple[float, bool]:
        """Hot path for one request: (floored α̂, personal?) from raw feature values, no sklearn validation."""
        z = self._standardise_one(values)
        theta = self._fast_personal.get(device_model) if device_model is not None else None
        personal = theta is not None
        if theta is None:
            theta = self._fast_cold
        acc = theta[0]
        for t, v in zip(theta[1:], z, strict=True):
            acc += t * v
        floor = self._floor(device_model) if personal else self.alpha_floor_
        return max(self.y_scale_ * acc, floor), personal

    def observe_one(self, values: list[float | None], alpha: float, device_model: str) -> SlopeRegressor:
        """Fast path of ``partial_fit`` for one request's raw feature values (no re-validation of X).

        A device model that already has its personal model (every push but its first) takes the same
        float64 operations as ``_partial_fit_z`` on one row, without its 2-D arrays (every push runs this)."""
        reg = self.models_.get(device_model) if isinstance(device_model, str) else None
        if reg is None:  # a new device model (or a wrong key: the general path says why)
            z = np.array([self._standardise_one(values)])
            return self._partial_fit_z(z, np.array([float(alpha)]), device_model)
        alpha = float(alpha)
        if not math.isfinite(alpha):
            raise ValueError("slopes must be finite")
        x = np.array([1.0, *self._standardise_one(values)])  # _augment's row
        pa1_step(reg.coef_, x, float(alpha / self.y_scale_), self.C, self.epsilon / self.y_scale_)
        reg.t_ += 1
        self.n_updates_[device_model] += 1
        if alpha > 0:
            self.min_alpha_[device_model] = min(self.min_alpha_.get(device_model, math.inf), alpha)
        self._fast_personal[device_model] = reg.coef_.tolist()
        self._add_pair(x[1:], alpha)
        return self

    def __sklearn_tags__(self) -> Any:
        """Declare that NaN (an unreadable feature) is accepted and imputed."""
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    # ------------------------------------------------------------------ private
    def _validate_hyperparameters(self) -> None:
        """Check the hyperparameters when fitting, never in __init__ (estimator contract)."""
        if not self.C > 0:
            raise ValueError(f"C must be > 0, got {self.C}")
        if not self.epsilon >= 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")
        if not 0 < self.alpha_floor_fraction <= 1:
            raise ValueError(f"alpha_floor_fraction must be in (0, 1], got {self.alpha_floor_fraction}")
        if int(self.max_pairs) < 0:
            raise ValueError(f"max_pairs must be >= 0, got {self.max_pairs}")
        if self.scale_floor is not None and not self.scale_floor >= 0:
            raise ValueError(f"scale_floor must be >= 0 or None, got {self.scale_floor}")
        if self.z_clip is not None and not self.z_clip > 0:
            raise ValueError(f"z_clip must be > 0 or None, got {self.z_clip}")
        if self.personal_init not in ("cold", "level"):
            raise ValueError(f"personal_init must be 'cold' or 'level', got {self.personal_init!r}")

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        """Standardise, impute a missing value by 0 (the training mean), clip to ±z_clip if set."""
        z = self.scaler_.transform(X)
        z = np.where(np.isnan(z), 0.0, z)
        return z if self.z_clip is None else np.clip(z, -self.z_clip, self.z_clip)

    def _standardise_one(self, values: list[float | None]) -> list[float]:
        """Standardise one row in pure Python (the same IEEE operations as StandardScaler.transform)."""
        z = [
            0.0 if v is None else (v - m) / s
            for v, m, s in zip(values, self._mean_list, self._scale_list, strict=True)
        ]
        if self.z_clip is None:
            return z
        return [min(max(v, -self.z_clip), self.z_clip) for v in z]

    def _reset_sums(self) -> None:
        """The normal equations (Σ aaᵀ, Σ a·y with a = [1, z]) of the bootstrap rows and the kept pairs."""
        a, y = _augment(self.boot_z_), self.boot_y_
        self._gram = a.T @ a
        self._moment = a.T @ y
        self._min_positive = float(y[y > 0].min()) if (y > 0).any() else math.inf
        for z, alpha in self.pairs_:  # in the order observe added them
            self._add_to_sums(np.asarray(z, dtype=np.float64), alpha)

    def _add_to_sums(self, row: np.ndarray, alpha: float, sign: float = 1.0) -> None:
        a = np.concatenate([[1.0], row])
        self._gram += sign * np.outer(a, a)
        self._moment += sign * alpha * a
        if sign > 0 and alpha > 0:
            self._min_positive = min(self._min_positive, alpha)

    def _add_pair(self, row: np.ndarray, alpha: float) -> None:
        """Keep one observed pair for refits: its row joins the normal equations, an evicted one leaves."""
        if self.pairs_.maxlen == 0:
            return
        if len(self.pairs_) == self.pairs_.maxlen:
            z_old, y_old = self.pairs_[0]
            self._add_to_sums(np.asarray(z_old, dtype=np.float64), y_old, sign=-1.0)
        self._add_to_sums(row, alpha)
        self.pairs_.append((tuple(row.tolist()), alpha))

    def _fit_cold(self, z: np.ndarray, y: np.ndarray) -> None:
        """Fit the cold-start OLS in standardised space (scikit-learn LinearRegression)."""
        self.cold_ = LinearRegression().fit(z, y)
        self._set_cold_theta()

    def _set_cold_theta(self) -> None:
        """Cache the cold model as θ = [bias, coef] in PA units, and the scaler as lists for the hot path."""
        theta = np.concatenate([[self.cold_.intercept_], self.cold_.coef_]) / self.y_scale_
        self._theta_cold = theta
        self._fast_cold = theta.tolist()
        self._mean_list = self.scaler_.mean_.tolist()
        self._scale_list = self.scaler_.scale_.tolist()

    def _make_template(self) -> None:
        """The unfitted PA-I regressor every device model clones (ε in PA units)."""
        self.pa_template_ = SGDRegressor(
            loss="epsilon_insensitive",
            penalty=None,
            learning_rate="pa1",
            eta0=self.C,
            epsilon=self.epsilon / self.y_scale_,
            fit_intercept=False,
            shuffle=False,
            random_state=0,
        )

    def _pa_from_coef(self, theta: np.ndarray, t: float) -> SGDRegressor:
        """A PA regressor that continues from θ (bootstrap from the cold start, or restore from state)."""
        reg = clone(self.pa_template_)
        reg.coef_ = np.ascontiguousarray(theta, dtype=np.float64).copy()
        reg.intercept_ = np.zeros(1)
        reg.t_ = float(t)
        reg.n_features_in_ = theta.shape[0]
        return reg

    def _floor(self, device_model: str | None) -> float:
        """The floor of α̂: the training data's, lowered by what this device model itself measured."""
        measured = self.min_alpha_.get(device_model) if device_model is not None else None
        if measured is None:
            return self.alpha_floor_
        return min(self.alpha_floor_, self.alpha_floor_fraction * measured)

    def _theta(self, device_model: str | None) -> np.ndarray:
        """θ of the personal model if any, else of the cold start."""
        reg = self.models_.get(device_model) if device_model is not None else None
        return self._theta_cold if reg is None else reg.coef_

    def _partial_fit_z(self, z: np.ndarray, y: np.ndarray, device_model: str) -> SlopeRegressor:
        """PA-update ``device_model`` on standardised rows z; remember the pairs for cold-start refits."""
        if not isinstance(device_model, str):
            raise TypeError(f"device_model must be a str, got {type(device_model).__name__}")
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("slopes must be finite")
        reg = self.models_.get(device_model)
        if reg is None:
            theta = np.asarray(self._theta_cold, dtype=np.float64)
            if self.personal_init == "level":
                theta = np.concatenate([[float(_augment(z[:1])[0] @ theta)], np.zeros(theta.size - 1)])
            reg = self.models_[device_model] = self._pa_from_coef(theta, 1.0)
            self.n_updates_[device_model] = 0
        # the inputs were validated above (finite y, standardised z); see the module docstring
        epsilon = self.epsilon / self.y_scale_
        for x, target in zip(_augment(z), y / self.y_scale_, strict=True):
            pa1_step(reg.coef_, x, float(target), self.C, epsilon)
        reg.t_ += len(y)
        self.n_updates_[device_model] += len(y)
        positive = y[y > 0]
        if positive.size:
            seen = self.min_alpha_.get(device_model, math.inf)
            self.min_alpha_[device_model] = min(seen, float(positive.min()))
        self._fast_personal[device_model] = reg.coef_.tolist()
        for row, alpha in zip(z, y, strict=True):
            self._add_pair(row, float(alpha))
        return self
