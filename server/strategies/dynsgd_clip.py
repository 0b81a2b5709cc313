"""DynSGD made forgiving, Fleet's default from issue 19 to issue 28: 1/(τ+1) dampening, each gradient
clipped to the median norm of the last 100, and the rate ramped up over the first 200 gradients.

Issue 19 chose it on random label shards, where it was fastest to 90%. On sharper splits whose slowest
devices hold their own digits it plateaus below the other strategies: the dampening and the clip both
shrink exactly those devices' gradients (docs/results/default-search.md), so FedBuffEqual replaced it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from server.strategies.base import StrategySettings
from server.strategies.dynsgd import DynSGD
from server.strategies.wrappers import ClipNorm, WarmUp


class DynSGDClipSettings(StrategySettings):
    """A named preset: the same as ``dynsgd`` with the wrappers clip-norm (``factor``) inside warm-up."""

    name: Literal["dynsgd-clip"] = "dynsgd-clip"
    clip_factor: float = Field(
        1.0, gt=0, description="clip each gradient to this × the median norm of the last 100"
    )
    warmup_gradients: int = Field(200, ge=0, description="the rate is ramped up over this many gradients")


class DynSGDClip(WarmUp):
    name = "dynsgd-clip"  # type: ignore[assignment]
    settings = DynSGDClipSettings

    def __init__(
        self,
        *,
        learning_rate: float = 0.5,
        k: int = 1,
        time_window: float | None = None,
        clip_factor: float = 1.0,
        warmup_gradients: int = 200,
    ) -> None:
        inner = DynSGD(learning_rate=learning_rate, k=k, time_window=time_window)
        super().__init__(ClipNorm(inner, factor=clip_factor), gradients=warmup_gradients)
