"""The base class every aggregation strategy extends; the interface itself is the core's ``Strategy``
port (server/core/ports.py), re-exported here with ``Arrival`` and ``TaskTerms``.

A strategy turns arriving gradients into model updates. It does no I/O and reads no clock: the
coordinator passes ``now`` in, persists ``state_dict()`` with each update, and calls the hooks in
this order: ``terms_for`` and ``admit`` at task time, ``receive`` on each arrival, ``ready``, then
``aggregate``. Triggers: K gradients (``k``) or a time window since the buffer's first gradient, whichever
comes first; a strategy with rounds (SSGD) overrides ``admit``/``ready`` to add a barrier and a deadline.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

# the port, and the values it takes and gives, are the core's (server/core/ports.py); re-exported here
from server.core.ports import Arrival, TaskTerms
from server.core.ports import Strategy as StrategyPort

__all__ = ["Arrival", "Buffered", "Strategy", "StrategyPort", "StrategySettings", "TaskTerms"]


class StrategySettings(BaseModel):
    """The typed settings of a strategy (server/settings.py's ``strategy``).

    Each strategy declares its own subclass next to it, with ``name: Literal["<its name>"]`` (the
    discriminator) and one ``Field(default, description=...)`` per constructor keyword it takes, and sets it
    as ``Strategy.settings``; the registry (server/strategies/__init__.py) unions them. The field names are
    the constructor's keywords, so ``kwargs()`` is what the strategy is built with."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every value finite

    name: str
    learning_rate: float | None = Field(
        None, gt=0, le=100, description="γ, the server's learning rate; unset: the strategy's own default"
    )
    k: int | None = Field(
        None, ge=1, le=100_000, description="gradients per update (the buffer's K); unset: the strategy's own"
    )
    time_window: float | None = Field(
        None,
        gt=0,
        le=86_400,
        description="seconds after the buffer's first gradient when it is applied even if short of K",
    )
    max_step: float | None = Field(
        None,
        gt=0,
        le=10,
        description="the longest step relative to the parameters' norm (unset: uncapped, or the model's own"
        " for the default strategy)",
    )

    def kwargs(self) -> dict[str, Any]:
        """The constructor's keywords: every field but ``name``; an unset (None) one leaves the strategy's
        own default."""
        return {key: value for key, value in self if key != "name" and value is not None}


@dataclass
class Buffered:
    """One weighted gradient waiting for the trigger."""

    task_id: str
    weight: float
    gradient: np.ndarray
    received_at: float


class Strategy(StrategyPort):
    """Weigh each gradient, buffer it, and step the model when the trigger fires: the shared base of
    every strategy here, implementing the core's ``Strategy`` port (an abstract class: ``weigh``)."""

    name: ClassVar[str] = "strategy"
    # True: the step is the weighted mean over the buffer (FedBuff, SSGD); False: the weighted sum (FLeet)
    average: ClassVar[bool] = False
    settings: ClassVar[type[StrategySettings]] = StrategySettings
    # why its grants can only run with DP on (server/settings_rules.py refuses it without), or None
    needs_dp: ClassVar[str | None] = None
    # the longest step relative to the parameters, ‖Δθ‖ ≤ max_step·‖θ‖ (a trust ratio, as LARS puts it on a
    # layer, here on the server's update); None: uncapped. The settings' ``max_step``, or a bundled model's
    # for the default strategy (its manifest's): a rate set too high then shortens its steps, not diverges
    max_step: float | None = None
    steps_capped: int = 0  # updates the cap shortened

    def __init__(self, *, learning_rate: float = 0.05, k: int = 1, time_window: float | None = None) -> None:
        self.learning_rate = learning_rate
        self.k = k
        self.time_window = time_window
        self.buffer: list[Buffered] = []
        self.updates = 0

    # -- hooks ---------------------------------------------------------------------------------
    def reads(self) -> frozenset[str]:
        """What this strategy itself reads of a task request or an arrival beyond the gradient, staleness
        and batch size: ``"loss"``, ``"label_counts"``. A DP device sends neither (they are not noised), so
        the settings refuse DP with a strategy or wrapper that reads one (``server.strategies.dp_refusal``);
        a wrapper declares its own and ``dp_refusal`` walks the strategies it wraps."""
        return frozenset()

    def on_register(self, device_id: str) -> None:  # noqa: B027 - an optional hook, not abstract
        """A device enrolled (strategies with per-device state override this)."""

    def terms_for(self, *, device_id: str, label_counts: np.ndarray | None) -> TaskTerms:
        """Per-task terms handed out with a grant."""
        return TaskTerms()

    def admit(self, *, device_id: str, version: int, now: float) -> str | None:
        """A reason to tell this device to wait (e.g. "round_full"), or None to grant it a task."""
        return None

    @abstractmethod
    def weigh(self, arrival: Arrival) -> float:
        """The weight this gradient is applied with (may update the strategy's statistics)."""

    def receive(self, arrival: Arrival) -> float:
        """Weigh and buffer one gradient; returns its weight."""
        weight = float(self.weigh(arrival))
        self.buffer.append(Buffered(arrival.task_id, weight, arrival.gradient, arrival.received_at))
        return weight

    def withheld(self, arrival: Arrival) -> None:
        """An outer wrapper gave ``arrival`` weight 0, so it never reaches ``receive``; a layer that counts
        arrivals (EqualShare) still counts it: a device is as frequent as it arrives, not as it passes."""

    def ready(self, now: float) -> bool:
        """Whether the buffer should be applied now."""
        if not self.buffer:
            return False
        if len(self.buffer) >= self.k:
            return True
        return self.time_window is not None and now - self.buffer[0].received_at >= self.time_window

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        """The new parameters from the buffer's combined gradient, as a new array; empties the buffer."""
        direction = self.combine(params)
        self.buffer.clear()
        self.updates += 1
        return self.capped(params, self.apply(params, direction))

    def capped(self, params: np.ndarray, new: np.ndarray) -> np.ndarray:
        """``new``, its step from ``params`` shortened to ``max_step`` × ‖params‖ when longer; parameters at
        zero (a model that starts there) are never capped, or they could not move."""
        if self.max_step is None:
            return new
        step = new - params
        size, limit = float(np.linalg.norm(step)), self.max_step * float(np.linalg.norm(params))
        if limit <= 0 or size <= limit:
            return new
        self.steps_capped += 1
        return params + step * np.float32(limit / size)

    def serving(self, params: np.ndarray) -> np.ndarray:
        """The parameters to serve (evaluate, export for inference) while the model holds ``params``: those
        themselves, unless a wrapper keeps an average of them (server/strategies/serving_average.py)."""
        return params

    def coefficients(self) -> np.ndarray:
        """c_i with ``combine`` = Σ c_i G_i over the buffer (float64): what a defence that replaces the
        combination needs (server/strategies/direction.py). A strategy overriding ``combine`` overrides
        this too (a test checks every registered strategy)."""
        weights = np.array([b.weight for b in self.buffer], dtype=np.float64)
        return weights / len(weights) if self.average and len(weights) else weights

    def combine(self, params: np.ndarray) -> np.ndarray:
        """Σ w_i G_i over the buffer (divided by its length when ``average``)."""
        direction = np.zeros_like(params)
        for item in self.buffer:
            direction += np.float32(item.weight) * item.gradient
        if self.average and self.buffer:
            direction /= np.float32(len(self.buffer))
        return direction

    def apply(self, params: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """The server's step: plain SGD, θ − γ·direction (server optimizers override this)."""
        return params - np.float32(self.learning_rate) * direction

    def describe(self) -> dict[str, Any]:
        """Current figures worth showing (τ_thres, counters)."""
        figures: dict[str, Any] = {
            "strategy": self.name,
            "learning_rate": self.learning_rate,
            "k": self.k,
            "updates": self.updates,
        }
        if self.max_step is not None:
            figures |= {"max_step": self.max_step, "steps_capped": self.steps_capped}
        return figures

    # -- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-able values and numpy arrays; restored by ``load_state_dict``."""
        return {
            "updates": self.updates,
            "buffer": [
                {"task_id": b.task_id, "weight": b.weight, "received_at": b.received_at} for b in self.buffer
            ],
            "buffer_gradients": np.stack([b.gradient for b in self.buffer]) if self.buffer else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state.get("updates", 0))
        grads = state.get("buffer_gradients")
        self.buffer = [
            Buffered(
                b["task_id"], float(b["weight"]), np.asarray(grads[i], dtype=np.float32), b["received_at"]
            )
            for i, b in enumerate(state.get("buffer", []))
        ]

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(learning_rate={self.learning_rate}, k={self.k}, time_window={self.time_window})"
