"""`fleet demo --dp-epsilon E`: the budget buys exactly the planned tasks, and the demo says so on screen.

No demo is run: the plan is checked against the accountant the ledgers use, and the end-of-run statement
is driven with figures.
"""

from __future__ import annotations

import pytest

pytest.importorskip("dp_accounting")

from client._ledger import RATE_CAP  # noqa: E402
from fleet.demo import DemoConfig, dp_plan, dp_settings  # noqa: E402
from fleet.demo_dp import (  # noqa: E402
    DP_BATCH,
    DP_TASKS,
    MEASURED,
    DPPlan,
    dp_learning_rate,
    dp_verdict,
    plan_dp,
)
from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent, epsilon  # noqa: E402


@pytest.fixture(scope="module")
def plan() -> DPPlan:
    """The shipped default at ε = 2 on the demo's 200-digit phones (reported as the bucket 192)."""
    return plan_dp(2.0, 200)


def test_the_default_plan_spends_exactly_the_budget_in_its_tasks(plan: DPPlan) -> None:
    assert (plan.batch, plan.bucket, plan.tasks) == (DP_BATCH, 192, DP_TASKS)
    assert plan.q == pytest.approx(DP_BATCH / 192) and plan.q <= RATE_CAP
    # what the coordinator's and the phones' ledgers charge: PLD, replace-one, δ = 1e-8
    at_tasks = epsilon([PrivacyEvent(plan.sigma, plan.q, plan.tasks)], DEFAULT_DELTA)
    one_more = epsilon([PrivacyEvent(plan.sigma, plan.q, plan.tasks + 1)], DEFAULT_DELTA)
    assert 1.99 <= at_tasks <= 2.0 < one_more


def test_the_demo_pins_the_batch_so_q_is_the_plans(plan: DPPlan) -> None:
    env = dp_settings(plan)
    assert env["FLEET_MIN_BATCH"] == env["FLEET_MAX_BATCH"] == str(plan.batch)
    assert float(env["FLEET_DP_NOISE_MULTIPLIER"]) == pytest.approx(plan.sigma, rel=1e-5)
    assert float(env["FLEET_DP_EPSILON_BUDGET"]) == 2.0
    assert float(env["FLEET_LEARNING_RATE"]) == plan.learning_rate == dp_learning_rate(2.0) == 0.05
    assert dp_settings(None) == {} and dp_plan(DemoConfig(), 200) is None


def test_the_demos_options_reach_the_plan() -> None:
    chosen = dp_plan(DemoConfig(dp_epsilon=8.0, dp_tasks=60, dp_batch=500, learning_rate=0.3), 200)
    assert chosen is not None
    assert chosen.batch == int(RATE_CAP * 192)  # capped by the phones' own q cap
    assert (chosen.tasks, chosen.learning_rate) == (60, 0.3)
    other = dp_plan(DemoConfig(dp_epsilon=8.0, dp_tasks=60, strategy="dynsgd"), 200)
    assert other is not None and other.learning_rate is None  # another strategy keeps its own rate
    assert "FLEET_LEARNING_RATE" not in dp_settings(other)


def test_the_start_says_what_the_budget_buys(plan: DPPlan) -> None:
    line = plan.describe(0.92)
    for part in (
        "ε = 2",
        f"{plan.tasks} DP-SGD tasks",
        f"B = {plan.batch}",
        "q = 0.052",
        f"σ = {plan.sigma:.3f}",
    ):
        assert part in line
    measured = MEASURED.get((plan.epsilon, plan.batch, plan.tasks, plan.learning_rate))
    if measured is not None:
        assert f"final accuracy {measured.accuracy:.2f}" in line
        assert ("out of reach" in line) == (measured.accuracy < 0.92)


def test_the_end_says_plainly_when_the_budget_ran_out(plan: DPPlan) -> None:
    verdict = dp_verdict(plan, accuracy=0.426, target=0.92, exhausted=20, devices=20)
    assert verdict is not None
    assert "Every phone is out of privacy budget" in verdict and "0.426" in verdict
    assert "larger ε or more data per phone" in verdict


def test_the_end_names_the_time_limit_when_budget_remained(plan: DPPlan) -> None:
    verdict = dp_verdict(plan, accuracy=0.4, target=0.92, exhausted=3, devices=20)
    assert verdict is not None and "3 of 20 phones" in verdict and "time limit" in verdict


def test_nothing_to_explain_when_the_target_was_reached(plan: DPPlan) -> None:
    assert dp_verdict(plan, accuracy=0.93, target=0.92, exhausted=20, devices=20) is None
