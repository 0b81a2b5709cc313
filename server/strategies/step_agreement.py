"""Step agreement: the server's step size follows whether successive updates agree (issue 28's candidate).

The third default search found that on most held-back workloads the fastest tuned run was the default
strategy itself at another rate, and that ×2-×4 of its rate could end at chance level. One constant rate
cannot be both. This wrapper multiplies every applied step by m, and after each update moves log m by
``beta`` × the cosine between this update and the last: updates that keep pointing the same way (the
step is too short to overshoot) grow it, updates that point back (oscillation: too long) shrink it, and
noise at the floor (cosine near 0, slightly negative) lets it decay. It is hypergradient descent on the
log of the rate (Baydin et al. 2018, "Online learning rate adaptation with hypergradient descent"), with
the cosine in place of the raw inner product so that it needs no scale. It reads only the updates (no
loss, no labels), so it composes with DP.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Strategy
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


class StepAgreementSettings(WrapperSettings):
    name: Literal["step-agreement"] = "step-agreement"
    beta: float = Field(
        0.05, gt=0, le=1, description="log of the step multiplier moves by this × the cosine, per update"
    )
    low: float = Field(0.25, gt=0, le=1, description="the multiplier's floor (× the strategy's rate)")
    high: float = Field(4.0, ge=1, description="the multiplier's ceiling (× the strategy's rate)")


class StepAgreement(StrategyWrapper):
    """Multiply each update by ``multiplier``, kept in [``low``, ``high``], which grows by exp(``beta`` ×
    cos) with the cosine between successive updates (the unscaled steps of the inner strategy)."""

    settings = StepAgreementSettings

    def __init__(self, inner: Strategy, *, beta: float = 0.05, low: float = 0.25, high: float = 4.0) -> None:
        super().__init__(inner)
        if not 0 < low <= 1 <= high:
            raise ValueError(f"need 0 < low ≤ 1 ≤ high, not low {low}, high {high}")
        self.beta, self.low, self.high = beta, low, high
        self.multiplier = 1.0
        self.cosine: float | None = None  # between the last two updates
        self.previous: np.ndarray | None = None

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        step = self.inner.aggregate(params) - params
        previous, self.previous = self.previous, step
        if previous is not None and previous.shape == step.shape:
            norms = float(np.linalg.norm(step)) * float(np.linalg.norm(previous))
            if norms > 0 and math.isfinite(norms):
                self.cosine = float(np.dot(step, previous)) / norms
                grown = self.multiplier * math.exp(self.beta * self.cosine)
                self.multiplier = min(self.high, max(self.low, grown))
        return params + np.float32(self.multiplier) * step

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "step_multiplier": self.multiplier, "step_cosine": self.cosine}

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "step_multiplier": self.multiplier, "step_previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.multiplier = float(state.get("step_multiplier", 1.0))
        previous = state.get("step_previous")
        self.previous = None if previous is None else np.asarray(previous, dtype=np.float32)
