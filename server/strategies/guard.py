"""``LossGuard``: halve the learning rate when the devices' training loss climbs, so a rate set too
high backs off instead of diverging.

Devices report the loss of every gradient they compute. The guard keeps a short exponential average
of those losses and the lowest value that average has reached; when the average rises above
``spike`` × that low, the rate is halved (down to ``floor`` of its value) and the low is reset to the
current average, and no further halving happens for ``cooldown`` gradients. A rate that never makes
the loss climb is never touched, so a well-set rate runs at full speed. A DP device sends no loss, so
the guard is refused with DP on (``reads``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Arrival, Strategy
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


class LossGuardSettings(WrapperSettings):
    name: Literal["loss-guard"] = "loss-guard"
    spike: float = Field(1.5, gt=1, description="halve the rate when the loss average exceeds this × its low")
    span: int = Field(50, ge=1, description="gradients in the loss's exponential average")
    cooldown: int = Field(100, ge=0, description="gradients after a halving before the next one")
    floor: float = Field(1 / 16, gt=0, le=1, description="the rate is never scaled below this fraction")
    warmup: int = Field(100, ge=0, description="gradients seen before the guard starts watching")


class LossGuard(StrategyWrapper):
    settings = LossGuardSettings

    def __init__(
        self,
        inner: Strategy,
        *,
        spike: float = 1.5,
        span: int = 50,
        cooldown: int = 100,
        floor: float = 1 / 16,
        warmup: int = 100,
    ) -> None:
        super().__init__(inner)
        self.spike, self.span, self.cooldown, self.floor, self.warmup = spike, span, cooldown, floor, warmup
        self.loss_average: float | None = None
        self.low = math.inf
        self.scale = 1.0
        self.seen = 0
        self.last_halving = -cooldown
        self.halvings = 0

    def reads(self) -> frozenset[str]:
        return frozenset({"loss"})

    def receive(self, arrival: Arrival) -> float:
        self.seen += 1
        loss = math.nan if arrival.loss is None else float(arrival.loss)  # None: a DP push sent none
        if math.isfinite(loss):
            alpha = 2.0 / (self.span + 1)
            self.loss_average = (
                loss if self.loss_average is None else (1 - alpha) * self.loss_average + alpha * loss
            )
            if self.seen >= self.warmup:
                self._check(self.loss_average)
        return self.inner.receive(arrival)

    def _check(self, average: float) -> None:
        self.low = min(self.low, average)
        cooled = self.seen - self.last_halving >= self.cooldown
        if cooled and average > self.spike * self.low and self.scale > self.floor:
            self.scale = max(self.floor, self.scale / 2)
            self.last_halving, self.low = self.seen, average
            self.halvings += 1

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        return self.aggregate_at(params, self.scale)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "rate_scale": self.scale, "halvings": self.halvings}

    def state_dict(self) -> dict[str, Any]:
        guard = {
            "average": self.loss_average,
            "low": None if math.isinf(self.low) else self.low,
            "scale": self.scale,
            "seen": self.seen,
            "last_halving": self.last_halving,
            "halvings": self.halvings,
        }
        return {**self.inner.state_dict(), "loss_guard": guard}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        guard = state.get("loss_guard") or {}
        self.loss_average = guard.get("average")
        self.low = math.inf if guard.get("low") is None else float(guard["low"])
        self.scale = float(guard.get("scale", 1.0))
        self.seen = int(guard.get("seen", 0))
        self.last_halving = int(guard.get("last_halving", -self.cooldown))
        self.halvings = int(guard.get("halvings", 0))
