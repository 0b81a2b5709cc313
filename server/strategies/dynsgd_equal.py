"""DynSGD with equal shares: the step scaled by the fleet's staleness, not each gradient's own.

DynSGD's 1/(τ+1) keeps the step stable however many gradients are in flight, but a gradient's own τ
grows with its device's round trip, so the slow devices' gradients are shrunk most; and a fast device
arrives more often. Here every gradient is dampened by the median τ of the last 200 arrivals
(``FleetStaleness``) and weighed by how rarely its device arrives (``EqualShare``); the rate is ramped
up over the first 200 gradients and outliers beyond 2× the recent median norm are clipped. One of issue
28's candidates for the default (docs/results/default-search.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from server.strategies.base import StrategySettings
from server.strategies.dynsgd import DynSGD
from server.strategies.fairness import EqualShare, FleetStaleness
from server.strategies.wrappers import ClipNorm, WarmUp


class DynSGDEqualSettings(StrategySettings):
    """A named preset: ``dynsgd`` inside clip-norm, warm-up, fleet-staleness and equal-share."""

    name: Literal["dynsgd-equal"] = "dynsgd-equal"
    clip_factor: float = Field(
        2.0, gt=0, description="clip each gradient to this × the median norm of the last 100"
    )
    warmup_gradients: int = Field(200, ge=0, description="the rate is ramped up over this many gradients")
    share_window: int = Field(
        200, ge=1, description="each device's share and the fleet's staleness are over this many arrivals"
    )


class DynSGDEqual(EqualShare):
    name = "dynsgd-equal"  # type: ignore[assignment]
    settings = DynSGDEqualSettings  # type: ignore[assignment]

    def __init__(
        self,
        *,
        learning_rate: float = 0.5,
        k: int = 1,
        time_window: float | None = None,
        clip_factor: float = 2.0,
        warmup_gradients: int = 200,
        share_window: int = 200,
    ) -> None:
        inner = ClipNorm(
            DynSGD(learning_rate=learning_rate, k=k, time_window=time_window), factor=clip_factor
        )
        staled = FleetStaleness(WarmUp(inner, gradients=warmup_gradients), window=share_window)
        super().__init__(staled, window=share_window)
