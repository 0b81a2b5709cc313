"""The training run's in-memory state, and the grant event a lease becomes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet_protocol import Manifest
from server.core.events import PrivacyCharged, TaskGranted
from server.core.leases import Lease
from server.core.ports import Strategy


@dataclass
class TrainingRun:
    """The active model's in-memory state: the newest parameters and how training should go on."""

    model_id: str
    manifest: Manifest
    params: np.ndarray
    version: int
    status: str
    strategy: Strategy
    stop_accuracy: float | None = None
    stop_versions: int | None = None
    latest_accuracy: float | None = None
    # the head a promotion made (0: none did): older versions and other models' tasks are refused
    floor: int = 0

    def served(self) -> np.ndarray:
        """The parameters served (evaluated, exported for inference): the newest, or the strategy's
        average of them (``Strategy.serving``); devices train the newest either way."""
        return self.strategy.serving(self.params)


def same_kind(a: Strategy, b: Strategy) -> bool:
    """Whether two strategies are the same classes all the way down their wrappers (a state fits both)."""
    while type(a) is type(b):
        inner_a, inner_b = getattr(a, "inner", None), getattr(b, "inner", None)
        if inner_a is None or inner_b is None:
            return inner_a is inner_b
        a, b = inner_a, inner_b
    return False


def carried_over(old: Strategy, new: Strategy) -> Strategy:
    """``new`` with ``old``'s state (buffer, counters, statistics) when it is the same kind, else fresh."""
    if same_kind(old, new):
        new.load_state_dict(old.state_dict())
    return new


def granted(
    lease: Lease, *, similarity: float | None, at: float, privacy: PrivacyCharged | None = None
) -> TaskGranted:
    """The event of a lease handed out."""
    return TaskGranted(
        task_id=lease.task_id,
        model_id=lease.model_id,
        device_id=lease.device_id,
        device_model=lease.device_model,
        version=lease.version,
        batch_size=lease.batch_size,
        similarity=similarity,
        features=lease.features,
        predicted_time_ms=lease.predicted_time_ms,
        predicted_energy=lease.predicted_energy,
        created_at=at,
        deadline=lease.deadline,
        privacy=privacy,
    )
