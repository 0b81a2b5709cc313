"""The coordinator core as the simulator runs it: in-memory SQLite, a virtual clock, sized batches.

The simulator drives the very ``Coordinator`` the HTTP routes drive; only storage (an in-memory SQLite
database shared through one connection) and the batch-size oracle differ. Experiments fix the
mini-batch size (or draw it, for the pruning figure) instead of asking I-Prof.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool

from fleet_protocol import Bundle
from server.core.admission import AdmissionController
from server.core.coordinator import Coordinator
from server.core.ports import BatchDecision, Profiler
from server.core.types import TaskRequest
from server.store.database import migrate, session_factory
from server.store.sql import SqlStore
from server.strategies import Strategy


class BatchSizer:
    """Stands in for I-Prof (a ``Profiler``): a fixed mini-batch, or one drawn from N(mean, std) (the
    pruning figure)."""

    time_slo_ms = 1000.0
    energy_slo = None

    def __init__(
        self,
        *,
        mean: int = 100,
        std: float = 0.0,
        rng: np.random.Generator | None = None,
        minimum: int = 1,
        per_model: Mapping[str, int] | None = None,
    ) -> None:
        """``per_model``: a fixed size for these device models (what I-Prof converges to under a time SLO
        when each simulated device is its own model: ``FleetSimulator(batches=...)``)."""
        self.mean, self.std, self.minimum = mean, std, minimum
        self.per_model = dict(per_model or {})
        self.min_batch, self.max_batch = minimum, max(minimum, mean)
        self.rng = rng or np.random.default_rng(0)

    def __repr__(self) -> str:
        return f"BatchSizer(mean={self.mean}, std={self.std})"

    def batch_size(self, device_model: str, features: Mapping[str, Any]) -> BatchDecision:
        if device_model in self.per_model:
            return BatchDecision(self.per_model[device_model])
        if self.std <= 0:
            return BatchDecision(self.mean)
        return BatchDecision(max(self.minimum, int(round(self.rng.normal(self.mean, self.std)))))

    def observe(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to learn: the size is given."""

    def device_models(self) -> list[str]:
        return []

    def device_state(self, device_model: str) -> dict[str, Any]:
        return {}

    def load_device_state(self, device_model: str, state: Mapping[str, Any] | None) -> None:
        """Stateless."""

    def cold_state(self) -> dict[str, Any]:
        return {}

    def load_cold_state(self, state: Mapping[str, Any]) -> None:
        """Stateless."""


class VirtualClock:
    """The simulator's time; the coordinator reads it through ``__call__``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def build_core(
    bundle: Bundle,
    strategy_factory: Callable[[], Strategy],
    *,
    clock: Callable[[], float],
    sizer: Profiler | None = None,
    admission: AdmissionController | None = None,
    version_policy: Callable[[TaskRequest, int], int] | None = None,
    lease_seconds: float = 1e9,
    version_retention: int = 200,
) -> Coordinator:
    """A fresh coordinator on an in-memory database, training ``bundle``."""
    engine = create_engine("sqlite://", connect_args={"check_same_thread": False}, poolclass=StaticPool)
    migrate(engine)
    coordinator = Coordinator(
        store=SqlStore(session_factory(engine), version_retention=version_retention),
        profiler=sizer or BatchSizer(),
        strategy_factory=strategy_factory,
        admission=admission,
        clock=clock,
        lease_seconds=lease_seconds,
        max_gradient_norm=1e12,
        version_retention=version_retention,
        version_policy=version_policy,
        durable=False,  # a simulation needs no crash safety: write in batches, never wait
    )
    coordinator.start()
    coordinator.add_model(bundle, actor="sim")
    return coordinator
