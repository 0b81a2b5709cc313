"""Wrappers that balance who moves the model, and how far, in a fleet of unequal devices (issue 28).

``EqualShare`` gives every device active lately the same pull whatever its speed; ``FleetStaleness``
dampens by the fleet's staleness rather than each gradient's own; ``ConcurrencyScale`` shrinks the rate
as more gradients are in flight, so a rate chosen on tens of devices holds on a thousand.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import deque
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Arrival, Strategy
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


class EqualShareSettings(WrapperSettings):
    name: Literal["equal-share"] = "equal-share"
    window: int = Field(200, ge=1, description="the shares are counted over this many last arrivals")
    cap: float = Field(4.0, ge=1, description="no gradient is weighed more than this × or less than 1/this ×")


class EqualShare(StrategyWrapper):
    """Weigh each gradient by how rarely its device arrives, so every device active lately moves the model
    alike: without it a device 3× faster pulls the model 3× harder toward its own data, and with
    label-skewed data the slow devices' classes are under-learned (issue 28). Each device's weight is the
    mean count per active device over the last ``window`` arrivals divided by its own count (mean weight
    1, so the rate is unchanged), bounded by ``cap`` either way; FedAU (Wang and Ji 2023) weighs by the
    participation interval to the same end."""

    settings = EqualShareSettings

    def __init__(self, inner: Strategy, *, window: int = 200, cap: float = 4.0) -> None:
        super().__init__(inner)
        self.window, self.cap = window, cap
        self.recent: deque[str] = deque(maxlen=window)
        self.counts: dict[str, int] = {}

    def share(self, device_id: str) -> float:
        """The factor ``device_id``'s next gradient is weighed by (after it is counted)."""
        mean = len(self.recent) / max(1, len(self.counts))
        return min(self.cap, max(1.0 / self.cap, mean / max(1, self.counts.get(device_id, 0))))

    def _count(self, device_id: str) -> None:
        if len(self.recent) == self.recent.maxlen:
            gone = self.recent[0]
            self.counts[gone] -= 1
            if not self.counts[gone]:
                del self.counts[gone]
        self.recent.append(device_id)
        self.counts[device_id] = self.counts.get(device_id, 0) + 1

    def receive(self, arrival: Arrival) -> float:
        self._count(arrival.device_id)
        return self.receive_scaled(arrival, self.share(arrival.device_id))

    def withheld(self, arrival: Arrival) -> None:
        # counted all the same: a device whose pushes a defence mostly drops would otherwise look rare,
        # and the one that passes would weigh up to ``cap`` times (issue 30: 4x for ALIE past FLTrust)
        self._count(arrival.device_id)
        self.inner.withheld(arrival)

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "equal_share_recent": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.recent, self.counts = deque(maxlen=self.window), {}
        for device_id in state.get("equal_share_recent", []):
            self._count(str(device_id))


class FleetStalenessSettings(WrapperSettings):
    name: Literal["fleet-staleness"] = "fleet-staleness"
    window: int = Field(200, ge=1, description="the median staleness is over this many last arrivals")


class FleetStaleness(StrategyWrapper):
    """Dampen every gradient by the fleet's median staleness over the last ``window`` arrivals instead
    of its own. A gradient's own τ grows with its device's round trip, so own-staleness dampening
    shrinks the slow devices' gradients most (issue 28's plateau); the fleet's τ tracks how many
    gradients are in flight, which is what a stable step has to scale with (Koloskova et al. 2022)."""

    settings = FleetStalenessSettings

    def __init__(self, inner: Strategy, *, window: int = 200) -> None:
        super().__init__(inner)
        self.window = window
        self.recent: deque[int] = deque(maxlen=window)

    def receive(self, arrival: Arrival) -> float:
        self.recent.append(arrival.staleness)
        typical = int(statistics.median_low(self.recent))
        return self.inner.receive(dataclasses.replace(arrival, staleness=typical))

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "fleet_staleness": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.recent = deque((int(t) for t in state.get("fleet_staleness", [])), maxlen=self.window)


def staleness_spread(staleness: Iterable[int]) -> float:
    """(p90 − p10) / p50 of the staleness seen: about 0.25 with equal task times, 0.9 with a 7x speed spread
    and 2 with a 30x one (issue 28's twenty-first probe)."""
    p10, p50, p90 = np.percentile(np.fromiter(staleness, float), [10, 50, 90])
    return float((p90 - p10) / max(p50, 1.0))


class ConcurrencyScaleSettings(WrapperSettings):
    name: Literal["concurrency-scale"] = "concurrency-scale"
    reference: float = Field(
        20.0, gt=0, description="the median staleness up to which the rate is left as set"
    )
    power: float = Field(1.0, gt=0, description="the rate shrinks as (reference / median staleness)^power")
    window: int = Field(200, ge=1, description="the median staleness is over this many last arrivals")
    cap_reference: float | None = Field(
        None, gt=0, description="past this median staleness the step cap shrinks as 1/τ (unset: fixed)"
    )
    spread: float | None = Field(
        None,
        gt=0,
        description="past this spread of the staleness, (p90 − p10) / p50, the rate reads τ̄ over"
        " spread / this, at most 2 (unset: never)",
    )


class ConcurrencyScale(StrategyWrapper):
    """Scale the rate by (``reference`` / τ̄)^``power`` once the fleet's median staleness τ̄ passes
    ``reference``: the stable step of asynchronous SGD shrinks as 1/concurrency (Koloskova et al. 2022),
    and τ̄ ≈ c/K measures the c gradients in flight without knowing the fleet. A rate chosen on 20 to 100
    devices collapsed on 1,000 (issue 28: 0.29 final accuracy where 0.25× the rate reached 0.79); scaled
    linearly it reached 0.77, with a square-root law 0.40 (lab/probes/default_candidates.py).

    With ``cap_reference`` the step cap (``Strategy.max_step``) shrinks too, by ``cap_reference`` / τ̄ past it:
    a gradient is computed τ̄ updates back, so the model may drift τ̄ capped steps under it, and bounding
    that drift, not each step, is what keeps it stable. The fifth search's cap, fixed, let 100 devices
    collapse at 2x the rate (issue 28).

    With ``spread`` the rate (not the cap) reads τ̄ / s, s = (p90 − p10) / p50 of the window's staleness over
    ``spread``, within [1, 2], once the window is full: with equal task times every gradient is about τ̄
    old, with a 30x speed spread most come from fast devices a few updates old, and such fleets took twice
    the rate at which equal-time ones collapse (issue 28's twenty-first probe). Never above the rate
    itself."""

    settings = ConcurrencyScaleSettings

    def __init__(
        self,
        inner: Strategy,
        *,
        reference: float = 20.0,
        power: float = 1.0,
        window: int = 200,
        cap_reference: float | None = None,
        spread: float | None = None,
    ) -> None:
        super().__init__(inner)
        self.reference, self.power, self.window, self.cap_reference = reference, power, window, cap_reference
        self.spread = spread
        self.recent: deque[int] = deque(maxlen=window)

    def factor(self) -> float:
        """What the rate is multiplied by now."""
        return min(1.0, (self.reference * self.spread_factor() / self.typical()) ** self.power)

    def spread_factor(self) -> float:
        """s: how many times τ̄ overstates the delay that bounds the rate (1 without ``spread``)."""
        if self.spread is None or len(self.recent) < self.window:
            return 1.0
        return min(2.0, max(1.0, staleness_spread(self.recent) / self.spread))

    def cap_factor(self) -> float:
        """What the step cap is multiplied by now."""
        return 1.0 if self.cap_reference is None else min(1.0, self.cap_reference / self.typical())

    def typical(self) -> float:
        """The median staleness of the last ``window`` arrivals (τ̄)."""
        return max(statistics.median(self.recent) if self.recent else 0.0, 1e-9)

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        cap = self.inner.max_step
        if cap is None or self.cap_reference is None:
            return self.inner.aggregate(params)
        self.inner.max_step = cap * self.cap_factor()
        try:
            return self.inner.aggregate(params)
        finally:
            self.inner.max_step = cap

    def receive(self, arrival: Arrival) -> float:
        self.recent.append(arrival.staleness)
        return self.receive_scaled(arrival, self.factor())

    def describe(self) -> dict[str, Any]:
        figures = {**super().describe(), "concurrency_factor": round(self.factor(), 4)}
        if self.spread is not None:
            figures["staleness_spread_factor"] = round(self.spread_factor(), 4)
        if self.cap_reference is not None and self.max_step is not None:
            figures["max_step_now"] = round(self.max_step * self.cap_factor(), 6)
        return figures

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "concurrency_staleness": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.recent = deque((int(t) for t in state.get("concurrency_staleness", [])), maxlen=self.window)


class SampleWeightSettings(WrapperSettings):
    name: Literal["sample-weight"] = "sample-weight"
    power: float = Field(1.0, gt=0, le=1, description="weigh each gradient by (its batch / the mean)^power")
    window: int = Field(200, ge=1, description="the mean batch is over this many last arrivals")


class SampleWeight(StrategyWrapper):
    """Weigh each gradient by (its mini-batch / the mean of the last ``window`` arrivals')^``power``. I-Prof
    gives every device the same time a task, so a slow device's gradient comes from a third of a fast one's
    samples and is that much noisier; weighed equally, the noise caps where the model ends (issue 28's
    probe, around the sixth's default: dirichlet0.5-mlp-iprof 0.911 equal, 0.930 by samples). The mean
    weight stays 1, so the rate is unchanged, and with equal batches every weight is exactly 1: the wrapper
    changes nothing."""

    settings = SampleWeightSettings

    def __init__(self, inner: Strategy, *, power: float = 1.0, window: int = 200) -> None:
        super().__init__(inner)
        self.power, self.window = power, window
        self.recent: deque[int] = deque(maxlen=window)

    def receive(self, arrival: Arrival) -> float:
        self.recent.append(arrival.batch_size)
        return self.receive_scaled(
            arrival, (arrival.batch_size * len(self.recent) / sum(self.recent)) ** self.power
        )

    def withheld(self, arrival: Arrival) -> None:
        self.recent.append(arrival.batch_size)  # counted as EqualShare counts it
        self.inner.withheld(arrival)

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "sample_weight_batches": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.recent = deque((int(b) for b in state.get("sample_weight_batches", [])), maxlen=self.window)
