"""Serve a moving average of the parameters (Polyak averaging), while devices go on training the newest.

Asynchronous steps at a rate high enough to learn fast leave the newest parameters jittering around
where the average of the last few versions sits; evaluating and exporting that average gives the
accuracy of a lower rate at the speed of a higher one (issue 28's eighth probe: the MLP at twice its rate
with an average over about ten updates was as fast as the faster of the two rates on every workload
probed and ended at least as high). Devices are still handed the newest parameters: the average is what
the server serves, not what it trains. Post-processing of the updates, so it keeps any DP guarantee.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Strategy
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


def fingerprint(params: np.ndarray) -> str:
    """A digest of the parameters' bytes: which version an average belongs to, without keeping it."""
    return hashlib.blake2b(np.ascontiguousarray(params).tobytes(), digest_size=16).hexdigest()


class ServingAverageSettings(WrapperSettings):
    name: Literal["serving-average"] = "serving-average"
    decay: float = Field(
        0.9,
        ge=0,
        lt=1,
        description="the served parameters keep this share of the last served ones at each update (an"
        " average over about 1/(1 − decay) updates)",
    )


class ServingAverage(StrategyWrapper):
    """The parameters served (evaluated, exported for inference) are an exponential moving average of the
    versions: ā ← decay·ā + (1 − decay)·θ at each update. ``serving`` gives it only for the parameters it
    was last updated with: a version set from outside (a promotion, a rollback, another model) is served
    as it is until the next update starts a new average from it."""

    settings = ServingAverageSettings

    def __init__(self, inner: Strategy, *, decay: float = 0.9) -> None:
        super().__init__(inner)
        self.decay = decay
        self.averaged: np.ndarray | None = None
        self.of: str | None = None  # the fingerprint of the parameters the average was last updated with
        self._last: np.ndarray | None = None  # those parameters, while they are held (identity is cheap)

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        new = self.inner.aggregate(params)
        base = self.averaged if self.averaged is not None and self.serves(params) else params
        self.averaged = (np.float32(self.decay) * base + np.float32(1 - self.decay) * new).astype(np.float32)
        self._last, self.of = new, fingerprint(new)
        return new

    def serves(self, params: np.ndarray) -> bool:
        """Whether the average belongs to ``params`` (the parameters of the last update)."""
        return params is self._last or (self.of is not None and fingerprint(params) == self.of)

    def serving(self, params: np.ndarray) -> np.ndarray:
        if self.averaged is not None and self.serves(params):  # equal bytes: the same shape too
            return self.averaged
        return self.inner.serving(params)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "serving_average": self.decay}

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "serving_average": self.averaged, "serving_of": self.of}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        averaged = state.get("serving_average")
        self.averaged = None if averaged is None else np.asarray(averaged, dtype=np.float32)
        self.of, self._last = state.get("serving_of"), None
