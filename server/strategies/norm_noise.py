"""``NormNoise``: norm bounding with and without DP-style noise (issue 30), after Sun, Kairouz, Suresh and
McMahan 2019, "Can You Really Backdoor Federated Learning?": clip each update to a norm bound M, and
optionally add Gaussian noise to the aggregate ("weak DP"), which they found stops a backdoor at little
cost to the main task.

``ClipNorm`` (server/strategies/wrappers.py) already clips each gradient to a multiple of the recent median
norm, and the default fedbuff-equal and dynsgd-clip include it; so this wrapper adds only what is missing:

* ``bound``: a fixed norm bound M, each gradient scaled down to it at arrival (``noise_clipped`` counts
  them);
* ``noise``: σ; the step's direction (the buffer's combination) gets N(0, (σ·B)²) added per coordinate,
  B the fixed bound, or, unset, the threshold of the nearest ``clip-norm`` inside it (the median-relative
  bound of fedbuff-equal, dynsgd-clip, or a clip-norm listed before this wrapper).

Not differential privacy: nothing accounts for the noise (Fleet's DP is FLEET_DP, per example on the
device). Without a bound of either kind, or with neither a bound nor noise, server/settings_rules.py
refuses it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Arrival, Strategy
from server.strategies.direction import innermost, step_with
from server.strategies.wrappers import ClipNorm, StrategyWrapper, WrapperSettings


def inner_clip(strategy: Strategy) -> ClipNorm | None:
    """The nearest ``ClipNorm`` inside ``strategy`` (itself included), or None."""
    while True:
        if isinstance(strategy, ClipNorm):
            return strategy
        if not hasattr(strategy, "inner"):
            return None
        strategy = strategy.inner


class NormNoiseSettings(WrapperSettings):
    name: Literal["norm-noise"] = "norm-noise"
    bound: float | None = Field(
        None, gt=0, le=1e6, description="M: clip each gradient to this norm (unset: the inner clip-norm's)"
    )
    noise: float = Field(0.0, ge=0, le=100, description="σ: add N(0, (σ·bound)²) per coordinate to each step")


class NormNoise(StrategyWrapper):
    settings = NormNoiseSettings

    def __init__(
        self,
        inner: Strategy,
        *,
        bound: float | None = None,
        noise: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(inner)
        self.bound, self.noise = bound, noise
        self.rng = rng or np.random.default_rng()
        self.clipped = self.received = 0
        self.last_bound: float | None = None

    def effective_bound(self) -> float | None:
        """B: the fixed bound, else the inner clip-norm's current threshold (None before it has one)."""
        if self.bound is not None:
            return self.bound
        clip = inner_clip(self.inner)
        return None if clip is None else clip.threshold()

    def receive(self, arrival: Arrival) -> float:
        self.received += 1
        if self.bound is not None:
            norm = float(np.linalg.norm(arrival.gradient))
            if norm > self.bound:
                self.clipped += 1
                scaled = arrival.gradient * np.float32(self.bound / norm)
                arrival = dataclasses.replace(arrival, gradient=scaled)
        return self.inner.receive(arrival)

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        bound = self.effective_bound()
        self.last_bound = bound
        if not self.noise or bound is None or not self.buffer:
            return self.inner.aggregate(params)
        direction = innermost(self.inner).combine(params).astype(np.float64)
        direction += self.rng.normal(0.0, self.noise * bound, size=direction.shape)
        return step_with(self.inner, params, direction)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "noise_bound": self.last_bound,
            "noise_std": None if self.last_bound is None else self.noise * self.last_bound,
            "noise_clipped": self.clipped,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "norm_noise": {"clipped": self.clipped, "received": self.received}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        noise = state.get("norm_noise") or {}
        self.clipped = int(noise.get("clipped", 0))
        self.received = int(noise.get("received", 0))
