"""Wrappers that change how any strategy steps, composed around it (Flower's strategy-wrapper pattern).

``ClipNorm`` bounds each gradient's norm by a multiple of the median norm seen lately, so one huge
gradient (a fresh model, a bad batch) cannot throw the model off; ``WarmUp`` ramps the learning rate
over the first gradients, when the loss surface is steepest. Both keep their state in the wrapped
strategy's ``state_dict``.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

import numpy as np

from server.strategies.base import Arrival, Buffered, Strategy, TaskTerms


class StrategyWrapper(Strategy):
    """Delegates every hook to ``inner``; a subclass overrides only what it changes."""

    def __init__(self, inner: Strategy) -> None:  # noqa: D107 - no Strategy.__init__: inner holds the state
        self.inner = inner

    name = property(lambda self: self.inner.name)  # type: ignore[assignment]
    average = property(lambda self: self.inner.average)  # type: ignore[assignment]

    @property
    def learning_rate(self) -> float:  # type: ignore[override]
        return self.inner.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self.inner.learning_rate = value

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

    def terms_for(self, *, device_id: str, label_counts: np.ndarray) -> TaskTerms:
        return self.inner.terms_for(device_id=device_id, label_counts=label_counts)

    def admit(self, *, device_id: str, version: int, now: float) -> str | None:
        return self.inner.admit(device_id=device_id, version=version, now=now)

    def weigh(self, arrival: Arrival) -> float:
        return self.inner.weigh(arrival)

    def receive(self, arrival: Arrival) -> float:
        return self.inner.receive(arrival)

    def ready(self, now: float) -> bool:
        return self.inner.ready(now)

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        return self.inner.aggregate(params)

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


class ClipNorm(StrategyWrapper):
    """Scale each gradient down to at most ``factor`` × the median norm of the last ``window`` ones.

    Relative to the fleet's own gradients, so it needs no per-model threshold; the first
    ``bootstrap`` gradients only fill the history.
    """

    def __init__(
        self, inner: Strategy, *, factor: float = 1.0, window: int = 100, bootstrap: int = 5
    ) -> None:
        super().__init__(inner)
        self.factor, self.window, self.bootstrap = factor, window, bootstrap
        self.norms: deque[float] = deque(maxlen=window)
        self.clipped = 0
        # the threshold of the window as it was at the last append: a push and the coordinator's
        # describe() both read it, and a median of the window costs far more than a lookup
        self._threshold: tuple[deque[float], tuple[Any, ...], float | None] | None = None
        self._appends = 0

    def threshold(self) -> float | None:
        key = (self._appends, len(self.norms), self.factor, self.bootstrap)
        cached = self._threshold
        if cached is not None and cached[0] is self.norms and cached[1] == key:
            return cached[2]
        value = None
        if len(self.norms) >= self.bootstrap:
            value = self.factor * float(np.median(np.fromiter(self.norms, float)))
        self._threshold = (self.norms, key, value)
        return value

    def receive(self, arrival: Arrival) -> float:
        norm = float(np.linalg.norm(arrival.gradient))
        limit = self.threshold()
        self.norms.append(norm)
        self._appends += 1
        if limit is not None and norm > limit > 0:
            self.clipped += 1
            arrival = dataclasses.replace(arrival, gradient=arrival.gradient * np.float32(limit / norm))
        return self.inner.receive(arrival)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "clip_threshold": self.threshold(), "clipped": self.clipped}

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "clip_norms": list(self.norms), "clipped": self.clipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.norms = deque((float(n) for n in state.get("clip_norms", [])), maxlen=self.window)
        self.clipped = int(state.get("clipped", 0))


class WarmUp(StrategyWrapper):
    """Ramp the learning rate linearly from 1/``gradients`` of its value to all of it over the first
    ``gradients`` gradients (counted, not updates, so the ramp does not depend on K)."""

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
        rate = self.inner.learning_rate
        self.inner.learning_rate = rate * self.factor()
        try:
            return self.inner.aggregate(params)
        finally:
            self.inner.learning_rate = rate

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "warmup_factor": self.factor()}

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "warmup_seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.seen = int(state.get("warmup_seen", 0))
