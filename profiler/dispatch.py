"""The thesis's comparison harness: a round-robin dispatcher that alternates profilers per device.

Each device model's k-th request is sized by profiler ``k mod n`` (the first by the first profiler),
so every device meets every profiler equally often and in the same thermal and load conditions. Every
measurement is given to all profilers: each learns from the same data, so the comparison is between
their models, not their amounts of data. The dispatcher serves the coordinator like an ``IProf``
(it implements the ``Profiler`` port); persistence and the SLO are the first profiler's (the baselines are
experiment-only and not persisted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from profiler.maui import MauiProfiler
from server.core.ports import BatchDecision, Profiler

__all__ = ["RoundRobinDispatcher", "with_maui_baseline"]


class RoundRobinDispatcher:
    """Alternate each device model's requests between ``profilers`` (I-Prof first, then baselines)."""

    def __init__(self, profilers: Sequence[Profiler], names: Sequence[str] | None = None) -> None:
        self.profilers = list(profilers)
        self.names = list(names) if names is not None else [type(p).__name__ for p in self.profilers]
        self.requests: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"RoundRobinDispatcher({self.names!r})"

    @property
    def primary(self) -> Profiler:
        """The profiler whose state is persisted (the first one)."""
        return self.profilers[0]

    @property
    def time_slo_ms(self) -> float:
        return float(self.primary.time_slo_ms)

    @property
    def energy_slo(self) -> float | None:
        return self.primary.energy_slo

    @property
    def min_batch(self) -> int:
        return int(self.primary.min_batch)

    @property
    def max_batch(self) -> int:
        return int(self.primary.max_batch)

    def assign(self, device_model: str) -> int:
        """Index of the profiler that sizes this device model's next request (advances its counter)."""
        k = self.requests.get(device_model, 0)
        self.requests[device_model] = k + 1
        return k % len(self.profilers)

    def batch_size(self, device_model: str, features: Mapping[str, Any]) -> BatchDecision:
        """The decision of the profiler whose turn it is for this device model."""
        return self.batch_size_by(self.assign(device_model), device_model, features)

    def batch_size_by(self, index: int, device_model: str, features: Mapping[str, Any]) -> BatchDecision:
        """The decision of profiler ``index`` (no counter change; experiments log which one answered)."""
        return self.profilers[index].batch_size(device_model, features)

    def observe(
        self,
        device_model: str,
        features: Mapping[str, Any],
        batch_size: int,
        time_ms: float,
        energy: float | None = None,
    ) -> RoundRobinDispatcher:
        """Every profiler learns from every measurement."""
        for profiler in self.profilers:
            profiler.observe(device_model, features, batch_size, time_ms, energy)
        return self

    # --- persistence: the primary profiler's (what the coordinator saves and restores) -----------
    def cold_state(self) -> dict[str, Any]:
        return self.primary.cold_state()

    def load_cold_state(self, state: Mapping[str, Any]) -> RoundRobinDispatcher:
        self.primary.load_cold_state(state)
        return self

    def device_state(self, device_model: str) -> dict[str, Any]:
        return self.primary.device_state(device_model)

    def load_device_state(self, device_model: str, state: Mapping[str, Any]) -> RoundRobinDispatcher:
        self.primary.load_device_state(device_model, state)
        return self

    def device_models(self) -> list[str]:
        return self.primary.device_models()


def with_maui_baseline(iprof: Any, bootstrap: str | Path | None = None) -> RoundRobinDispatcher:
    """I-Prof and MAUI alternating per device model; MAUI trains on the bootstrap file's (L, t, e)
    rows, or, without one, on I-Prof's prior slopes (one pseudo-measurement)."""
    maui = MauiProfiler(
        time_slo_ms=iprof.time_slo_ms,
        energy_slo=iprof.energy_slo,
        min_batch=iprof.min_batch,
        max_batch=iprof.max_batch,
    )
    if bootstrap is not None:
        maui.load_bootstrap(bootstrap)
    else:
        maui.fit([1.0], [iprof.prior_time_slope_ms], [iprof.prior_energy_slope])
    return RoundRobinDispatcher([iprof, maui], ["iprof", "maui"])
