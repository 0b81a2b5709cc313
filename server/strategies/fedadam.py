"""FedAdam and FedYogi (Reddi et al. 2021, "Adaptive Federated Optimization") on a FedBuff buffer.

The buffer's dampened mean gradient is the pseudo-gradient of an adaptive server optimizer: a
per-coordinate step γ·m/(√v + ε), so the step size hardly depends on the gradients' scale.
Reddi et al.'s form: no bias correction, v starts at ε².
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import StrategySettings
from server.strategies.fedbuff import FedBuff


class FedAdamSettings(StrategySettings):
    name: Literal["fedadam"] = "fedadam"
    beta1: float = Field(0.9, ge=0, lt=1, description="β₁, the decay of the server's first moment")
    beta2: float = Field(0.99, ge=0, lt=1, description="β₂, the decay of the server's second moment")
    epsilon: float = Field(1e-3, gt=0, description="ε, added to √v (adaptivity)")


class FedYogiSettings(FedAdamSettings):
    name: Literal["fedyogi"] = "fedyogi"  # type: ignore[assignment]


class FedAdam(FedBuff):
    name = "fedadam"
    settings = FedAdamSettings

    def __init__(
        self,
        *,
        learning_rate: float = 0.005,
        k: int = 10,
        time_window: float | None = None,
        beta1: float = 0.9,
        beta2: float = 0.99,
        epsilon: float = 1e-3,
    ) -> None:
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.m: np.ndarray | None = None
        self.v: np.ndarray | None = None

    def second_moment(self, v: np.ndarray, g2: np.ndarray) -> np.ndarray:
        """Adam's exponential average of squared gradients."""
        return self.beta2 * v + (1.0 - self.beta2) * g2

    def apply(self, params: np.ndarray, direction: np.ndarray) -> np.ndarray:
        if self.m is None or self.v is None:
            self.m = np.zeros_like(params)
            self.v = np.full_like(params, self.epsilon**2)
        self.m = (self.beta1 * self.m + (1.0 - self.beta1) * direction).astype(np.float32)
        self.v = self.second_moment(self.v, direction * direction).astype(np.float32)
        step = self.m / (np.sqrt(self.v) + np.float32(self.epsilon))
        return params - np.float32(self.learning_rate) * step

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "m": self.m, "v": self.v}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        m, v = state.get("m"), state.get("v")
        self.m = None if m is None else np.asarray(m, dtype=np.float32)
        self.v = None if v is None else np.asarray(v, dtype=np.float32)


class FedYogi(FedAdam):
    """Yogi's additive second moment: v grows or shrinks by at most (1−β2)·g², never jumps."""

    name = "fedyogi"
    settings = FedYogiSettings

    def second_moment(self, v: np.ndarray, g2: np.ndarray) -> np.ndarray:
        return v - (1.0 - self.beta2) * g2 * np.sign(v - g2)
