"""``TrustedBound``: no gradient moves a parameter much further than the server's trusted data moves it,
relative to the rest (issue 30's backdoor defence).

A pixel-trigger backdoor is learnt through the parameters its patch feeds: the first layer's weights from
those pixels. Clean digits leave the corner patch dark, and 12% of them have ink 4 pixels in, so honest
gradients move those weights little or not at all, while the attackers, half of whose batch carries the
patch, move them a lot. A cosine (FLTrust) does not see it: most of the attackers' batch is clean digits,
and the patch's weights are a few hundred of 100k. So the bound looks coordinate by coordinate. Its
profile p is the magnitude of the trusted gradient g_s on each parameter, averaged over the last
~``memory`` versions; a push g is clipped to

    |g_j| ≤ bound · (p_j / ‖p‖) · ‖g‖,

each coordinate's share of the push at most ``bound`` times its share of the trusted gradients. A
parameter the trusted digits never move (p_j = 0) is not moved; an honest device's gradient keeps its
direction where its share is within ``bound`` of the trusted mix's. What that costs honest non-IID devices
and what it stops is measured in docs/robustness-history.md (the eighth look).

The profile is not kept in the state: after a restart it starts again from the first g_s. It needs the
trusted gradient port (the ``trusted-score`` entry's data, server/compose.py ``trusted_gradient``).
``trusted_bound_removed`` is the mean share of a push's squared norm the bound took off.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.core.ports import ReferenceGradient
from server.strategies.base import Arrival, Strategy
from server.strategies.trusted_score import head_start
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


class TrustedBoundSettings(WrapperSettings):
    name: Literal["trusted-bound"] = "trusted-bound"
    bound: float = Field(
        4.0,
        gt=0,
        le=1e6,
        description="a coordinate's share of a push may be at most this × its share of the trusted gradients",
    )
    memory: int = Field(
        50, ge=1, le=100_000, description="the trusted profile averages |g_s| over the last ~this many"
    )
    layers: Literal["all", "body"] = Field(
        "all", description="bound every parameter, or those under the output layer only (body)"
    )


class TrustedBound(StrategyWrapper):
    settings = TrustedBoundSettings
    uses_reference = True  # server/strategies/__init__.py ``wrap`` gives it the trusted gradient port

    def __init__(
        self,
        inner: Strategy,
        *,
        bound: float = 4.0,
        memory: int = 50,
        layers: Literal["all", "body"] = "all",
        reference: ReferenceGradient | None = None,
    ) -> None:
        super().__init__(inner)
        self.bound, self.memory, self.layers, self.reference = bound, memory, layers, reference
        self.profile: np.ndarray | None = None  # the average |g_s|, float64
        self.profiled: int | None = None  # the version last folded into it
        self.limits: np.ndarray | None = None  # bound × p_j / ‖p‖ (inf where unbounded), float32
        self.received = self.clipped = 0
        self.removed = 0.0  # the sum over pushes of the share of ‖g‖² taken off

    def limits_at(self, version: int) -> np.ndarray | None:
        """Each parameter's limit per unit of a push's norm, with g_s at ``version`` folded into the
        profile once (an exponential average over ~memory); None before there is one or while it is 0."""
        if self.profiled == version or self.reference is None:
            return self.limits
        trusted = self.reference.gradient()
        if trusted is None:
            return self.limits
        magnitude = np.abs(trusted.astype(np.float64))
        if self.profile is None or self.profile.shape != magnitude.shape:
            self.profile = magnitude
        else:
            self.profile += (magnitude - self.profile) * (2.0 / (self.memory + 1))
        self.profiled = version
        scale = float(np.linalg.norm(self.profile))
        self.limits = None if scale == 0.0 else (self.profile * (self.bound / scale)).astype(np.float32)
        head = None if self.limits is None or self.layers == "all" else self.reference.head()
        if head is not None:  # the output layer unbounded: a device's labels concentrate it there
            self.limits[head_start(head) :] = np.inf
        return self.limits

    def receive(self, arrival: Arrival) -> float:
        self.received += 1
        limits = self.limits_at(arrival.base_version + arrival.staleness)
        gradient = arrival.gradient
        if limits is None or limits.shape != gradient.shape:
            return self.inner.receive(arrival)
        norm = float(np.linalg.norm(gradient))
        if norm == 0.0:
            return self.inner.receive(arrival)
        limit = limits * np.float32(norm)
        bounded = np.clip(gradient, -limit, limit)
        kept = float(np.linalg.norm(bounded))
        if kept < norm:
            self.clipped += 1
            self.removed += 1.0 - (kept / norm) ** 2
        return self.inner.receive(dataclasses.replace(arrival, gradient=bounded))

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "trusted_bound": self.bound,
            "trusted_bound_clipped": self.clipped,
            "trusted_bound_removed": self.removed / max(self.received, 1),
        }
