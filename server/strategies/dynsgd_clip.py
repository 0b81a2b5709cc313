"""DynSGD made forgiving, Fleet's default: 1/(τ+1) dampening, each gradient clipped to the median norm
of the last 100, and the rate ramped up over the first 200 gradients.

Chosen by measurement (issue 19, docs/results/default-search.md and peer-flower.md): the dampening
keeps stale gradients small however many devices are in flight; clipping stops the rare huge gradient
from throwing the model off, so the rate can be 2.5x DynSGD's best; the warm-up gets past the steep
first steps. At 0.5 it learns from x0.25 to x4 its rate without diverging (simulated and real).
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
