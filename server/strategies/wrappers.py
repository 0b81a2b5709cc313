"""Wrappers that change how any strategy steps, composed around it (Flower's strategy-wrapper pattern).

``ClipNorm`` bounds each gradient's norm by a multiple of the median norm seen lately, so one huge
gradient (a fresh model, a bad batch) cannot throw the model off; ``WarmUp`` ramps the learning rate
over the first gradients, when the loss surface is steepest. Both keep their state in the wrapped
strategy's ``state_dict``.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import deque
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from server.strategies.base import Arrival, Buffered, Strategy, TaskTerms


class WrapperSettings(BaseModel):
    """The typed settings of one wrapper in server/settings.py's ``wrappers`` list.

    Each wrapper declares its subclass next to it, with ``name: Literal["<its name>"]`` (the discriminator)
    and one ``Field(default, description=...)`` per constructor keyword, and sets it as the wrapper's
    ``settings``; the registry (server/strategies/__init__.py ``WRAPPERS``) unions them. ``legacy`` names a
    flat switch kept for old configurations (``kardam``: FLEET_KARDAM=true and FLEET_KARDAM_<FIELD>)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every value finite

    name: str
    legacy: ClassVar[str | None] = None

    def kwargs(self) -> dict[str, Any]:
        """The wrapper's constructor keywords (besides the strategy it wraps)."""
        return {key: value for key, value in self if key != "name"}


class StrategyWrapper(Strategy):
    """Delegates every hook to ``inner``; a subclass overrides only what it changes."""

    settings: ClassVar[type[WrapperSettings]] = WrapperSettings  # type: ignore[assignment]

    def __init__(self, inner: Strategy) -> None:  # noqa: D107 - no Strategy.__init__: inner holds the state
        self.inner = inner

    @classmethod
    def needs_reference(cls, config: WrapperSettings) -> bool:
        """Whether this configuration reads the trusted gradient port (``uses_reference``: given one)."""
        return bool(getattr(cls, "uses_reference", False))

    name = property(lambda self: self.inner.name)  # type: ignore[assignment]
    average = property(lambda self: self.inner.average)  # type: ignore[assignment]

    @property
    def learning_rate(self) -> float:  # type: ignore[override]
        return self.inner.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self.inner.learning_rate = value

    def aggregate_at(self, params: np.ndarray, factor: float) -> np.ndarray:
        """The inner strategy's update with its rate times ``factor`` for this update alone (warm-up, a
        guard's halvings: the rate itself is left as set)."""
        rate = self.inner.learning_rate
        self.inner.learning_rate = rate * factor
        try:
            return self.inner.aggregate(params)
        finally:
            self.inner.learning_rate = rate

    @property
    def max_step(self) -> float | None:  # type: ignore[override]
        return self.inner.max_step

    @max_step.setter
    def max_step(self, value: float | None) -> None:
        self.inner.max_step = value

    @property
    def steps_capped(self) -> int:  # type: ignore[override]
        return self.inner.steps_capped

    @property
    def k(self) -> int:  # type: ignore[override]
        return self.inner.k

    @property
    def buffer(self) -> list[Buffered]:  # type: ignore[override]
        return self.inner.buffer

    @property
    def updates(self) -> int:  # type: ignore[override]
        return self.inner.updates

    def on_register(self, device_id: str) -> None:
        self.inner.on_register(device_id)

    def terms_for(self, *, device_id: str, label_counts: np.ndarray | None) -> TaskTerms:
        return self.inner.terms_for(device_id=device_id, label_counts=label_counts)

    def admit(self, *, device_id: str, version: int, now: float) -> str | None:
        return self.inner.admit(device_id=device_id, version=version, now=now)

    def weigh(self, arrival: Arrival) -> float:
        return self.inner.weigh(arrival)

    def receive(self, arrival: Arrival) -> float:
        return self.inner.receive(arrival)

    def withheld(self, arrival: Arrival) -> None:
        self.inner.withheld(arrival)

    def receive_scaled(self, arrival: Arrival, factor: float) -> float:
        """``inner.receive``, with the gradient's weight (in the buffer too) multiplied by ``factor``."""
        before = len(self.inner.buffer)
        weight = self.inner.receive(arrival)
        if len(self.inner.buffer) > before:  # buffered (a filter may have dropped it)
            self.inner.buffer[-1].weight *= factor
        return weight * factor

    def ready(self, now: float) -> bool:
        return self.inner.ready(now)

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        return self.inner.aggregate(params)

    def serving(self, params: np.ndarray) -> np.ndarray:
        return self.inner.serving(params)

    def describe(self) -> dict[str, Any]:
        """The inner strategy's figures under this strategy's name (a named composition such as
        DynSGDClip reports itself, not the strategy it wraps)."""
        return {**self.inner.describe(), "strategy": self.name}

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class ClipNormSettings(WrapperSettings):
    name: Literal["clip-norm"] = "clip-norm"
    factor: float = Field(
        1.0, gt=0, description="clip each gradient to this × the median norm of recent ones"
    )
    window: int = Field(100, ge=1, description="the median is over this many last gradients' norms")
    bootstrap: int = Field(5, ge=0, description="gradients that only fill the history before clipping starts")
    until: int | None = Field(
        None, ge=0, description="clip only the first this many gradients (unset: always)"
    )


class ClipNorm(StrategyWrapper):
    """Scale each gradient down to at most ``factor`` × the median norm of the last ``window`` ones.

    Relative to the fleet's own gradients, so it needs no per-model threshold; the first
    ``bootstrap`` gradients only fill the history.
    """

    settings = ClipNormSettings

    def __init__(
        self,
        inner: Strategy,
        *,
        factor: float = 1.0,
        window: int = 100,
        bootstrap: int = 5,
        until: int | None = None,
    ) -> None:
        super().__init__(inner)
        self.factor, self.window, self.bootstrap, self.until = factor, window, bootstrap, until
        self.norms: deque[float] = deque(maxlen=window)
        self.clipped = 0
        self.seen = 0
        self._limit: list[float | None] = []  # the threshold, cached until the history changes

    def threshold(self) -> float | None:
        if not self._limit:
            enough = len(self.norms) >= self.bootstrap
            # statistics.median: the same value as numpy's for 100 floats, at a tenth of the cost
            self._limit = [self.factor * float(statistics.median(self.norms)) if enough else None]
        return self._limit[0]

    def receive(self, arrival: Arrival) -> float:
        self.seen += 1
        if self.until is not None and self.seen > self.until:
            return self.inner.receive(arrival)
        norm = float(np.linalg.norm(arrival.gradient))
        limit = self.threshold()
        self.norms.append(norm)
        self._limit = []
        if limit is not None and norm > limit > 0:
            self.clipped += 1
            arrival = dataclasses.replace(arrival, gradient=arrival.gradient * np.float32(limit / norm))
        return self.inner.receive(arrival)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "clip_threshold": self.threshold(), "clipped": self.clipped}

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.inner.state_dict(),
            "clip_norms": list(self.norms),
            "clipped": self.clipped,
            "clip_seen": self.seen,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.norms = deque((float(n) for n in state.get("clip_norms", [])), maxlen=self.window)
        self.clipped = int(state.get("clipped", 0))
        self.seen = int(state.get("clip_seen", 0))
        self._limit = []


class WarmUpSettings(WrapperSettings):
    name: Literal["warm-up"] = "warm-up"
    gradients: int = Field(200, ge=0, description="the rate is ramped up linearly over this many gradients")


class WarmUp(StrategyWrapper):
    """Ramp the learning rate linearly from 1/``gradients`` of its value to all of it over the first
    ``gradients`` gradients (counted, not updates, so the ramp does not depend on K)."""

    settings = WarmUpSettings

    def __init__(self, inner: Strategy, *, gradients: int = 200) -> None:
        super().__init__(inner)
        self.gradients = gradients
        self.seen = 0

    def factor(self) -> float:
        return min(1.0, (self.seen + 1) / max(1, self.gradients))

    def receive(self, arrival: Arrival) -> float:
        self.seen += 1
        return self.inner.receive(arrival)

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        return self.aggregate_at(params, self.factor())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "warmup_factor": self.factor()}

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "warmup_seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.seen = int(state.get("warmup_seen", 0))


class MomentumSettings(WrapperSettings):
    name: Literal["momentum"] = "momentum"
    beta: float = Field(0.9, ge=0, lt=1, description="server momentum: the share of the last step kept")


class Momentum(StrategyWrapper):
    """Server momentum (heavy ball on the server's steps, as FedAvgM): each update moves by the inner
    strategy's step plus ``beta`` × the previous move. The effective rate is γ/(1 − β)."""

    settings = MomentumSettings

    def __init__(self, inner: Strategy, *, beta: float = 0.9) -> None:
        super().__init__(inner)
        self.beta = beta
        self.velocity: np.ndarray | None = None

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        step = self.inner.aggregate(params) - params
        if self.velocity is not None and self.velocity.shape == step.shape:
            step += np.float32(self.beta) * self.velocity
        self.velocity = step
        return params + step

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "momentum_velocity": self.velocity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        velocity = state.get("momentum_velocity")
        self.velocity = None if velocity is None else np.asarray(velocity, dtype=np.float32)
