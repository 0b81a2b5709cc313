"""What a DP demo's ε budget buys: σ, q, tasks and rate chosen from the accountant, and what was measured.

Each phone holds ~200 digits and its examples are protected one by one (replace-one, δ = 1e-8), so the
budget is small against the noise a CNN tolerates. For a given ε the accountant leaves the total noise
against the total signal about fixed whatever the split into tasks (σ/(B·√T) is constant within 1% from
B = 100, T = 30 to B = 5, T = 2,000), so the demo splits it into many small steps (q ≈ 0.05), where each
noisy update moves the model little, and lowers the rate so that the noise does not swamp it. The
accuracies below were measured with the demo itself (one seed, a 2-core machine); ``dp_verdict`` says on
screen when a run ends below its target because every phone spent its budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "DP_BATCH",
    "DP_TASKS",
    "MEASURED",
    "DPPlan",
    "Measured",
    "dp_learning_rate",
    "dp_verdict",
    "plan_dp",
]

DP_BATCH = 10  # B: q = 10/192 ≈ 0.05 on a phone's 200 digits (reported as the bucket 192)
DP_TASKS = 300  # tasks per phone the budget pays for: σ is calibrated so that exactly these many fit


def dp_learning_rate(epsilon: float) -> float:
    """The default strategy's rate under DP: 0.05·√(ε/2), so 0.05 at ε = 2 and 0.1 at ε = 8, the best of
    the rates measured there (its own 0.2 lets the noise swamp the model; less noise, a larger step)."""
    return round(0.05 * math.sqrt(epsilon / 2), 4)


@dataclass(frozen=True)
class Measured:
    """One demo run of a configuration: its final test accuracy and its training time."""

    accuracy: float
    best: float  # the best evaluation during the run: the last seconds, slow phones only, can cost much
    seconds: float
    date: str


# (ε, B, tasks, rate) → the demo run that measured it (seed 0, 20 phones, 2-core machine); see docs/privacy.md
MEASURED: dict[tuple[float, int, int, float | None], Measured] = {
    (2.0, 10, 300, 0.05): Measured(0.426, 0.503, 92.6, "2026-11-26"),
    (4.0, 10, 300, 0.0707): Measured(0.632, 0.724, 122.4, "2026-11-26"),
    (8.0, 10, 300, 0.1): Measured(0.662, 0.776, 126.5, "2026-11-26"),
}


@dataclass(frozen=True)
class DPPlan:
    """A DP demo's terms: every phone is granted ``batch`` of its ``bucket`` examples (q = B/bucket) at
    noise multiplier ``sigma``, which spends ``epsilon`` (PLD, replace-one) in exactly ``tasks`` tasks."""

    epsilon: float
    delta: float
    batch: int
    bucket: int
    tasks: int
    sigma: float
    learning_rate: float | None  # None: the chosen strategy's own rate (the DP rule is for the default's)

    @property
    def q(self) -> float:
        return min(1.0, self.batch / self.bucket)

    @property
    def measured(self) -> Measured | None:
        """The demo run that measured this configuration, if one did."""
        return MEASURED.get((self.epsilon, self.batch, self.tasks, self.learning_rate))

    def describe(self, target: float) -> str:
        """What the budget buys, printed when a DP demo starts: the terms, and the accuracy a run of this
        configuration reached, so a ``target`` it cannot reach is said before the run, not after."""
        measured = self.measured
        expect = (
            f"measured: final accuracy {measured.accuracy:.2f} (best {measured.best:.2f}) after"
            f" {measured.seconds:.0f} s of training ({measured.date}, one seed, 2 cores)"
            if measured
            else "not measured for this configuration (docs/privacy.md lists the ones that were)"
        )
        if measured and measured.accuracy < target:
            expect += f", so the target {target:g} is out of reach at this ε"
        return (
            f"ε = {self.epsilon:g} per phone (δ = {self.delta:g}) buys {self.tasks} DP-SGD tasks of "
            f"B = {self.batch} of {self.bucket} digits (q = {self.q:.3f}) at σ = {self.sigma:.3f}, C = 1, "
            f"learning rate {self.learning_rate if self.learning_rate is not None else 'the strategy’s own'};"
            f" {expect}"
        )


def plan_dp(
    epsilon: float,
    local_examples: int,
    *,
    tasks: int | None = None,
    batch: int | None = None,
    learning_rate: float | None = None,
    default_strategy: bool = True,
) -> DPPlan:
    """σ from the accountant so that ``tasks`` tasks at B = ``batch`` (q = B over the bucketed N) spend
    exactly ``epsilon``, within the phones' own q cap (client/_ledger.py ``RATE_CAP``). The rate: the one
    given, else ``dp_learning_rate`` for the default strategy (measured there), else the strategy's own."""
    from client._ledger import RATE_CAP
    from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent, bucket_examples, calibrate_noise
    from fleet_protocol.accounting import epsilon as spent

    bucket = bucket_examples(local_examples)
    batch = max(1, min(batch or DP_BATCH, int(RATE_CAP * bucket)))
    tasks = tasks or DP_TASKS
    q = min(1.0, batch / bucket)
    sigma = calibrate_noise(epsilon, DEFAULT_DELTA, q, tasks)
    while spent([PrivacyEvent(sigma, q, tasks)], DEFAULT_DELTA) > epsilon:  # the ledgers' own PLD decides
        sigma *= 1.0005  # calibration's tolerance can land a hair over: the last task would be refused
    rate = learning_rate
    if rate is None and default_strategy:
        rate = dp_learning_rate(epsilon)
    return DPPlan(epsilon, DEFAULT_DELTA, batch, bucket, tasks, sigma, rate)


def dp_verdict(
    plan: DPPlan, accuracy: float | None, target: float, exhausted: int, devices: int
) -> str | None:
    """The plain statement a DP run ends with when it stopped below ``target``: why, and what would buy
    more (None when the target was reached)."""
    final = accuracy or 0.0
    if final >= target:
        return None
    measured = plan.measured
    expected = f" (measured for this configuration: {measured.accuracy:.2f})" if measured else ""
    if exhausted >= devices:
        return (
            f"Every phone is out of privacy budget (ε = {plan.epsilon:g} each, {plan.tasks} tasks) at test "
            f"accuracy {final:.3f}{expected}, below the target {target:g}: no more private learning can "
            "happen. A larger ε or more data per phone would buy more."
        )
    return (
        f"The run ended at test accuracy {final:.3f}{expected}, below the target {target:g}, with "
        f"{exhausted} of {devices} phones out of privacy budget (ε = {plan.epsilon:g} each): the time limit "
        "came first."
    )
