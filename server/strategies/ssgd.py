"""Synchronous SGD: a round barrier collects one gradient per selected device on one version, then steps.

A round starts at the first grant on a new version. ``admit`` grants at most ceil(k·over_selection)
tasks per round and tells everyone else to wait ("round_full"); a gradient computed on an older
version is dropped (weight 0, never buffered). The round closes when k gradients are in, or, with a
``time_window`` (the round deadline, measured from the round's first grant), when an arrival finds
the deadline passed: that late gradient is dropped and the round steps with what it has. With
``over_selection`` = 1.3 and a deadline this is SSGD as production systems run it; with 1.0 and no
deadline the round waits for its slowest device. The step is the mean of the round's gradients.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from server.strategies.base import Arrival, Buffered, Strategy, StrategySettings


class SSGDSettings(StrategySettings):
    name: Literal["ssgd"] = "ssgd"
    over_selection: float = Field(1.0, ge=1, description="tasks granted per round = ⌈K · this⌉")


class SSGD(Strategy):
    name = "ssgd"
    average = True
    settings = SSGDSettings

    def __init__(
        self,
        *,
        learning_rate: float = 0.05,
        k: int = 10,
        time_window: float | None = None,
        over_selection: float = 1.0,
    ) -> None:
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)
        self.over_selection = over_selection
        self.round_version = -1
        self.round_started = 0.0
        self.selected: set[str] = set()
        self.closing = False
        self.dropped = 0

    @property
    def quota(self) -> int:
        """Tasks granted per round."""
        return math.ceil(self.k * self.over_selection - 1e-9)

    def admit(self, *, device_id: str, version: int, now: float) -> str | None:
        if version != self.round_version:
            self.round_version, self.round_started, self.selected = version, now, set()
        if device_id in self.selected:
            return "already_selected"
        if len(self.selected) >= self.quota:
            return "round_full"
        self.selected.add(device_id)
        return None

    def weigh(self, arrival: Arrival) -> float:
        return 1.0

    def _past_deadline(self, now: float) -> bool:
        return self.time_window is not None and now - self.round_started >= self.time_window

    def receive(self, arrival: Arrival) -> float:
        late = self._past_deadline(arrival.received_at) and bool(self.buffer)
        if arrival.base_version != self.round_version or late or self.closing:
            self.closing = self.closing or late
            self.dropped += 1
            return 0.0
        self.buffer.append(Buffered(arrival.task_id, 1.0, arrival.gradient, arrival.received_at))
        return 1.0

    def ready(self, now: float) -> bool:
        if not self.buffer:
            return False
        return len(self.buffer) >= self.k or self.closing or self._past_deadline(now)

    def aggregate(self, params: Any) -> Any:
        self.closing = False
        return super().aggregate(params)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "round_version": self.round_version, "dropped": self.dropped}

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "round_version": self.round_version,
            "round_started": self.round_started,
            "selected": sorted(self.selected),
            "closing": self.closing,
            "dropped": self.dropped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.round_version = int(state.get("round_version", -1))
        self.round_started = float(state.get("round_started", 0.0))
        self.selected = set(state.get("selected", []))
        self.closing = bool(state.get("closing", False))
        self.dropped = int(state.get("dropped", 0))

    def __repr__(self) -> str:
        return (
            f"SSGD(learning_rate={self.learning_rate}, k={self.k}, time_window={self.time_window}, "
            f"over_selection={self.over_selection})"
        )
