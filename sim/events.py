"""The simulator's clock: a heap of (time, seq, event); time jumps to the popped event, nothing sleeps."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EventQueue:
    """Events are opaque tuples; ``seq`` breaks ties so equal times pop in scheduling order."""

    now: float = 0.0
    _heap: list[tuple[float, int, Any]] = field(default_factory=list)
    _seq: int = 0
    popped: int = 0  # events processed so far (the benchmarks divide by it)

    def __call__(self) -> float:
        """The virtual clock the coordinator reads."""
        return self.now

    def schedule(self, at: float, event: Any) -> None:
        if at < self.now:
            raise ValueError(f"cannot schedule in the past ({at} < {self.now})")
        heapq.heappush(self._heap, (at, self._seq, event))
        self._seq += 1

    def pop(self) -> Any:
        self.now, _, event = heapq.heappop(self._heap)
        self.popped += 1
        return event

    def __len__(self) -> int:
        return len(self._heap)
