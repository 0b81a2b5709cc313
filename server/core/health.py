"""The coordinator's health (issue 29): "ok", "degraded" or "down", and the reasons why.

An operator found the console saying "Training, 8/8 active" after every device had crashed. The checks
here are pure functions over ``Signals``, figures the core already keeps (gathered by
server/core/health_signals.py), so each can be tested with made-up numbers and a made-up clock. "down"
means the coordinator cannot serve (no storage, no model: /v1/ready answers 503); "degraded" means it
serves but training is not getting anywhere, which a person should look at and a load balancer should not.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from server.core.errors import TrainingFinished
from server.core.promotion import SUPERSEDED

OK, DEGRADED, DOWN = "ok", "degraded", "down"
STATES = (OK, DEGRADED, DOWN)  # a state's index is the value of the fleet_health_state gauge

# every reason code, with the state it puts the coordinator in (the /metrics gauges list them all)
CODES: dict[str, str] = {
    "storage_unavailable": DOWN,
    "no_model": DOWN,
    "journal_behind": DEGRADED,
    "no_pushes": DEGRADED,
    "devices_failing": DEGRADED,
    "privacy_exhausted": DEGRADED,
    "accuracy_falling": DEGRADED,
}
PER_DEVICE = 3  # a device is failing when most of its latest this-many outcomes in the window failed


@dataclass(frozen=True)
class HealthPolicy:
    """The thresholds (FLEET_HEALTH_*, server/settings_health.py; the defaults are the same)."""

    no_push_seconds: float = 20.0
    window_seconds: float = 120.0
    failing_share: float = 0.5
    accuracy_window: int = 6
    accuracy_drop: float = 0.05
    journal_seconds: float = 10.0


@dataclass(frozen=True)
class Outcome:
    """One task's end as the coordinator saw it: a push taken (ok), refused or declined (not ok)."""

    at: float
    device_id: str
    ok: bool


@dataclass(frozen=True)
class Signals:
    """What the checks read; None or empty where a figure is not known (the check then stays quiet)."""

    now: float
    storage_error: str | None = None
    model_loaded: bool = True
    status: str = "training"
    devices: int = 0  # enrolled
    last_push_at: float | None = None
    training_since: float | None = None  # when training last started or resumed in this process
    outcomes: tuple[Outcome, ...] = ()
    privacy: tuple[int, int] | None = None  # DP on: (devices in the ledger, of them out of budget)
    accuracies: tuple[float, ...] = ()  # the latest evaluations' accuracies, oldest first
    journal_pending: int = 0
    journal_oldest_at: float | None = None  # when the oldest write not yet committed was queued


@dataclass(frozen=True)
class Reason:
    code: str
    message: str

    @property
    def state(self) -> str:
        return CODES[self.code]


@dataclass(frozen=True)
class Health:
    state: str
    reasons: tuple[Reason, ...] = ()

    @property
    def level(self) -> int:
        return STATES.index(self.state)

    def codes(self) -> set[str]:
        return {reason.code for reason in self.reasons}

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reasons": [{"code": r.code, "state": r.state, "message": r.message} for r in self.reasons],
        }


def device_fault(error: BaseException) -> bool:
    """Whether a refused push counts against its device: not when training finished or a promotion made
    its task obsolete (every device's push is refused then, and rightly)."""
    return not isinstance(error, TrainingFinished) and str(error) != SUPERSEDED


def counted_devices(n: int) -> str:
    """A count in words ("1 device", "3 devices"): people read the reasons."""
    return f"{n} device" if n == 1 else f"{n} devices"


Check = Callable[[Signals, HealthPolicy], Reason | None]


def storage(s: Signals, _: HealthPolicy) -> Reason | None:
    if s.storage_error is None:
        return None
    return Reason("storage_unavailable", f"Storage is unavailable ({s.storage_error}): work is refused.")


def model(s: Signals, _: HealthPolicy) -> Reason | None:
    if s.model_loaded or s.storage_error is not None:  # without storage no model can be read: one reason
        return None
    return Reason("no_model", "No model is loaded: devices get no tasks.")


def journal(s: Signals, p: HealthPolicy) -> Reason | None:
    """Writes waiting for their commit: a slow or hung database shows here before pushes time out."""
    if s.journal_oldest_at is None or s.now - s.journal_oldest_at < p.journal_seconds:
        return None
    age = s.now - s.journal_oldest_at
    return Reason("journal_behind", f"{s.journal_pending} writes have waited {age:.0f} s for their commit.")


def pushes(s: Signals, p: HealthPolicy) -> Reason | None:
    """Enrolled devices and a running model but no gradient coming back: the devices are gone or stuck."""
    if s.status != "training" or s.devices == 0 or not s.model_loaded:
        return None
    known = [t for t in (s.last_push_at, s.training_since) if t is not None]
    if not known or s.now - max(known) < p.no_push_seconds:
        return None
    age, enrolled = s.now - max(known), counted_devices(s.devices)
    return Reason("no_pushes", f"No push for {age:.0f} s, with {enrolled} enrolled and training running.")


def failing_devices(outcomes: Sequence[Outcome], since: float) -> tuple[int, int]:
    """(devices whose latest outcomes since ``since`` mostly failed, devices with any outcome since)."""
    latest: dict[str, list[bool]] = {}
    for outcome in outcomes:
        if outcome.at >= since:
            latest.setdefault(outcome.device_id, []).append(outcome.ok)
    failing = sum(1 for oks in latest.values() if 2 * oks[-PER_DEVICE:].count(False) > len(oks[-PER_DEVICE:]))
    return failing, len(latest)


def devices(s: Signals, p: HealthPolicy) -> Reason | None:
    """Most devices' recent tasks refused or declined: they run but what they do is wasted."""
    failing, seen = failing_devices(s.outcomes, s.now - p.window_seconds)
    if seen == 0 or failing <= p.failing_share * seen:
        return None
    return Reason(
        "devices_failing",
        f"{failing} of {counted_devices(seen)} with tasks in the last {p.window_seconds:.0f} s had most "
        "of them refused or declined.",
    )


def privacy(s: Signals, _: HealthPolicy) -> Reason | None:
    if s.privacy is None or s.privacy[0] == 0 or s.privacy[1] < s.privacy[0]:
        return None
    return Reason(
        "privacy_exhausted",
        f"Every device ({s.privacy[0]}) is out of privacy budget: none can be given a task.",
    )


def accuracy_fall(accuracies: Sequence[float], min_drop: float) -> tuple[float, float] | None:
    """(the best earlier accuracy, the latest two's mean) when the latter is lower by ``min_drop`` and by
    more than three times the earlier ones' step-to-step noise; else None (too few, or within noise)."""
    values = [a for a in accuracies if math.isfinite(a)]
    if len(values) < 3:
        return None
    earlier, latest = values[:-2], sum(values[-2:]) / 2
    steps = [abs(b - a) for a, b in zip(earlier, earlier[1:], strict=False)]
    noise = statistics.median(steps) if steps else 0.0
    peak = max(earlier)
    return (peak, latest) if peak - latest >= max(min_drop, 3 * noise) else None


def accuracy(s: Signals, p: HealthPolicy) -> Reason | None:
    fall = accuracy_fall(s.accuracies[-p.accuracy_window :], p.accuracy_drop)
    if fall is None:
        return None
    return Reason(
        "accuracy_falling",
        f"Test accuracy fell from {fall[0]:.1%} to {fall[1]:.1%} over the last "
        f"{min(len(s.accuracies), p.accuracy_window)} evaluations.",
    )


CHECKS: tuple[Check, ...] = (storage, model, journal, pushes, devices, privacy, accuracy)


def assess(signals: Signals, policy: HealthPolicy | None = None) -> Health:
    """Every check's reason; the state is the worst of theirs (none: ok)."""
    policy = policy or HealthPolicy()
    reasons = tuple(r for check in CHECKS if (r := check(signals, policy)) is not None)
    worst = max((STATES.index(r.state) for r in reasons), default=0)
    return Health(STATES[worst], reasons)
