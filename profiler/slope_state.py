"""``SlopeRegressor``'s persistence: its cold-start part and each device model's personal model as JSON,
so the profiler's learning survives a coordinator restart (profiler/iprof.py saves and restores them)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Self

import numpy as np
from sklearn.linear_model import LinearRegression
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted


class SlopeState:
    """Mixed into ``SlopeRegressor`` (profiler/slope.py), whose fitted attributes it reads and sets."""

    def cold_state(self) -> dict[str, Any]:
        """JSON-serialisable cold-start part: scaler, OLS, scales, floor, bootstrap and observed pairs."""
        check_is_fitted(self)
        return {
            "n_features": int(self.n_features_in_),
            "scaler_mean": self.scaler_.mean_.tolist(),
            "scaler_var": self.scaler_.var_.tolist(),
            "scaler_scale": self.scaler_.scale_.tolist(),
            "scaler_n_samples_seen": np.asarray(self.scaler_.n_samples_seen_).tolist(),
            "cold_coef": self.cold_.coef_.tolist(),
            "cold_intercept": float(self.cold_.intercept_),
            "y_scale": self.y_scale_,
            "alpha_floor": self.alpha_floor_,
            "boot_z": self.boot_z_.tolist(),
            "boot_y": self.boot_y_.tolist(),
            "pairs_z": [list(p[0]) for p in self.pairs_],
            "pairs_y": [p[1] for p in self.pairs_],
            # the running sums themselves: rebuilt from the pairs they would differ in the last bits
            "normal_gram": self._gram.tolist(),
            "normal_moment": self._moment.tolist(),
            "min_positive": None if math.isinf(self._min_positive) else self._min_positive,
        }

    def load_cold_state(self, state: dict[str, Any]) -> Self:
        """Restore the cold-start part saved by ``cold_state``; personal models are dropped."""
        self._validate_hyperparameters()
        d = int(state["n_features"])
        scaler = StandardScaler()
        scaler.mean_ = np.array(state["scaler_mean"], dtype=np.float64)
        scaler.var_ = np.array(state["scaler_var"], dtype=np.float64)
        scaler.scale_ = np.array(state["scaler_scale"], dtype=np.float64)
        scaler.n_samples_seen_ = np.array(state["scaler_n_samples_seen"])
        scaler.n_features_in_ = d
        self.scaler_ = scaler
        self.n_features_in_ = d
        self.y_scale_ = float(state["y_scale"])
        self.alpha_floor_ = float(state["alpha_floor"])
        self.boot_z_ = np.array(state["boot_z"], dtype=np.float64).reshape(-1, d)
        self.boot_y_ = np.array(state["boot_y"], dtype=np.float64)
        self.pairs_ = deque(
            ((tuple(z), float(y)) for z, y in zip(state["pairs_z"], state["pairs_y"], strict=True)),
            maxlen=self.max_pairs,
        )
        cold = LinearRegression()
        cold.coef_ = np.array(state["cold_coef"], dtype=np.float64)
        cold.intercept_ = float(state["cold_intercept"])
        cold.n_features_in_ = d
        self.cold_ = cold
        self._set_cold_theta()
        self._reset_sums()
        if "normal_gram" in state:  # absent in states saved before the amortised refit
            self._gram = np.array(state["normal_gram"], dtype=np.float64)
            self._moment = np.array(state["normal_moment"], dtype=np.float64)
            self._min_positive = math.inf if state["min_positive"] is None else float(state["min_positive"])
        self.models_ = {}
        self.n_updates_ = {}
        self.min_alpha_ = {}
        self._fast_personal = {}
        self._make_template()
        return self

    def device_state(self, device_model: str) -> dict[str, Any] | None:
        """JSON-serialisable personal model of one device model (None if it has none yet)."""
        check_is_fitted(self)
        reg = self.models_.get(device_model)
        if reg is None:
            return None
        return {
            "coef": reg.coef_.tolist(),
            "t": float(reg.t_),
            "n_updates": self.n_updates_[device_model],
            "min_alpha": self.min_alpha_.get(device_model),
        }

    def load_device_state(self, device_model: str, state: dict[str, Any] | None) -> Self:
        """Restore one device model's personal model saved by ``device_state`` (None removes it)."""
        check_is_fitted(self)
        if state is None:
            self.models_.pop(device_model, None)
            self.n_updates_.pop(device_model, None)
            self.min_alpha_.pop(device_model, None)
            self._fast_personal.pop(device_model, None)
            return self
        self.models_[device_model] = self._pa_from_coef(np.array(state["coef"], dtype=np.float64), state["t"])
        self.n_updates_[device_model] = int(state["n_updates"])
        if state.get("min_alpha") is not None:  # absent in states saved before the per-device floor
            self.min_alpha_[device_model] = float(state["min_alpha"])
        else:
            self.min_alpha_.pop(device_model, None)
        self._fast_personal[device_model] = list(state["coef"])
        return self
