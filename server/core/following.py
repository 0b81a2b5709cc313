"""How a coordinator's head moves besides its own pushes (server/compose.py picks the part per role).

The single process and the aggregator own their training state (``OwnState``): only their pushes move
the head, and each journal batch checkpoints the strategy and the touched profiles. An API worker
(docs/scale-out.md) follows the aggregator (``FollowStorage``): it reads the active model's newest
committed version from storage on each announcement, and the strategy's and profiler's state that
grants are computed from at most every ``state_refresh_s``; it owns none of it, so its checkpoints
carry none (they would overwrite the aggregator's).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from server.core.run import TrainingRun

__all__ = ["FollowStorage", "Head", "HeadStore", "OwnState", "Versions"]


@dataclass(frozen=True)
class Head:
    """What storage says of the active model, read off the coordinator's lock."""

    model_id: str
    version: int
    status: str
    params: bytes | None = None  # the version's parameters, when newer than the run's
    strategy_state: dict[str, Any] | None = None
    profiles: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)


class Versions(Protocol):
    """Where the coordinator's training state comes from besides its own pushes."""

    owns_state: bool  # whether checkpoints carry the strategy's and profiles' state (True: it writes it)

    def read(self, run: TrainingRun | None) -> Head | None:
        """What changed in storage since ``run`` (None: nothing to follow). Called off the lock."""
        ...


class OwnState:
    """Nothing to follow: this process's pushes are the only writer of its training state."""

    owns_state = True

    def read(self, run: TrainingRun | None) -> Head | None:
        return None


class HeadStore(Protocol):
    """The reads ``FollowStorage`` needs: the SQL store has them (server/store/sql.py)."""

    def active_head(self) -> tuple[str, int, str] | None: ...
    def version_params(self, model_id: str, version: int) -> bytes | None: ...
    def strategy_state(self, model_id: str) -> dict[str, Any] | None: ...
    def profiler_states(self) -> dict[str, dict[str, Any]]: ...


class FollowStorage:
    """An API worker's: the aggregator writes the state, this reads it back from storage."""

    owns_state = False

    def __init__(self, store: HeadStore, *, state_refresh_s: float = 1.0) -> None:
        self.store = store
        self.state_refresh_s = state_refresh_s  # the strategy and profiler state: re-read at most so often
        self._state_read_at = 0.0

    def read(self, run: TrainingRun | None) -> Head | None:
        head = self.store.active_head()
        if head is None:
            return None
        model_id, version, status = head
        if run is None or run.model_id != model_id:
            return Head(model_id, version, status)  # the coordinator activates it from storage
        params = self.store.version_params(model_id, version) if version > run.version else None
        now = time.monotonic()
        if now - self._state_read_at < self.state_refresh_s:
            return Head(model_id, version, status, params)
        strategy, profiles = self.store.strategy_state(model_id), self.store.profiler_states()
        self._state_read_at = now
        return Head(model_id, version, status, params, strategy, profiles)
