"""The lab's contract and runner (lab/): plans are data, the runner writes the files, the CLI lists."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lab.__main__ import app
from lab.contract import Context, Experiment, Plan, Result
from lab.runner import ENTRIES, entry, write

ROOT = Path(__file__).resolve().parent.parent


def test_every_entry_has_a_quick_and_a_full_plan_as_dataclasses():
    for name in ENTRIES:
        e = entry(name)
        assert isinstance(e, Experiment), name
        assert dataclasses.is_dataclass(e.quick) and dataclasses.is_dataclass(e.full), name
        assert e.quick.quick and not e.full.quick, name
        assert type(e.quick) is type(e.full), name


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyPlan(Plan):
    points: int = 10


def _run(plan: TinyPlan, ctx: Context) -> Result:
    with ctx.steps("points", plan.points) as steps:
        for _ in range(plan.points):
            steps.advance()
    return Result({"points": plan.points, "quick": plan.quick}, series={"x": list(range(plan.points))})


def _plot(result: Result):
    from lab.render import figure

    fig, axes = figure(1)
    axes[0].plot(result.series["x"])
    return fig


TINY = Experiment("tiny", TinyPlan(quick=True, points=3), TinyPlan(), _run, lambda r, p: "# tiny", _plot)


def test_the_runner_writes_the_record_markdown_and_plot(tmp_path):
    plan = TINY.plan(quick=True)
    result = _run(plan, Context("tiny-quick"))
    record = write(TINY, plan, result, tmp_path, "tiny-quick")
    assert record == {"summary": {"points": 3, "quick": True}, "series": {"x": [0, 1, 2]}}
    assert json.loads((tmp_path / "tiny-quick.json").read_text()) == record
    assert (tmp_path / "tiny-quick.md").read_text() == "# tiny\n"
    assert (tmp_path / "tiny-quick.png").stat().st_size > 0
    assert result.claims == []  # the results table cites no record named tiny


def test_cli_lists_experiments_and_benchmarks():
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0
    assert "staleness" in result.output and "performance" in result.output


def test_the_wheel_never_imports_the_lab():
    code = (
        "import sys, fleet.cli, fleet.process, sim.scenario; "
        "print(any(m == 'lab' or m.startswith('lab.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# the tests whose subject is the lab itself; every other test is a test of the system and must not import
# the lab (it imports tests/support/, which the lab imports too). pyproject.toml's import-linter contract
# says the same for `make lint`; this catches it in the test run.
LAB_TESTS = {
    "test_lab.py", "test_experiments_quick.py", "test_profiler_experiments.py", "test_results_table.py",
    "test_dp_staleness_report.py",
}  # fmt: skip


def _imports_lab(path: Path) -> list[str]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [f"{path.name}:{node.lineno} {n}" for n in names if n == "lab" or n.startswith("lab.")]
    return found


def test_tests_of_the_system_do_not_import_the_lab():
    tests = ROOT / "tests"
    prefixes = ("test_bench", "test_experiment")
    lab_tests = [p for p in tests.glob("*.py") if p.name in LAB_TESTS or p.name.startswith(prefixes)]
    others = [p for p in [*tests.glob("*.py"), *tests.glob("support/*.py")] if p not in lab_tests]
    assert not [hit for p in others for hit in _imports_lab(p)]
    assert _imports_lab(tests / "test_lab.py")  # the scan sees imports


def test_benchmarks_do_not_branch_on_quick():
    """Plans are data: no ``if quick`` / ``… if quick else …`` in lab/bench (``plan.quick`` names files)."""
    import ast

    branches = []
    for path in (ROOT / "lab" / "bench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If | ast.IfExp | ast.While):
                names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
                if "quick" in names:
                    branches.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert branches == []


@pytest.mark.parametrize("name", ["mapa", "wkafl", "kardam", "vandijk", "wire_float16"])
def test_the_experiments_have_no_private_training_loop(name):
    """They hand gradients to the core (sim/scripted.py), never to a strategy themselves."""
    source = inspect.getsource(importlib.import_module(f"lab.experiments.{name}"))
    assert "ScriptedFleet" in source
    for call in ("Arrival(", ".receive(", ".aggregate(", ".ready("):
        assert call not in source, (name, call)


def test_the_plateau_probe_runs_each_arm_and_reports_recall_per_class():
    from lab.probes.default_plateau import probe

    rows = probe("dirichlet0.5-logreg", 60, {"dynsgd-0.2": {"strategy": "dynsgd", "learning_rate": 0.2}})
    assert len(rows) == 1 and len(rows[0]["recall"]) == 10 and 0 <= rows[0]["final"] <= rows[0]["best"] <= 1


def test_the_loss_rate_probe_moves_its_multiplier_on_the_loss_trend_within_bounds():
    from lab.probes.loss_rate import BOUNDS, LossRate
    from server.strategies import FedBuff

    bold = LossRate(FedBuff(learning_rate=0.1, k=1), "bold-2-0.5-10")
    for average in (1.0, 0.9, 0.8, 0.7, 0.6):  # falling: doubled each window, to the upper bound
        bold._move(average)
    assert bold.multiplier == BOUNDS[1]
    bold._move(0.65)  # a rise halves it
    assert bold.multiplier == BOUNDS[1] / 2
    plateau = LossRate(FedBuff(learning_rate=0.1, k=1), "plateau-10-0.1")
    plateau._move(1.0)
    plateau._move(0.8)  # fell by 20%: kept at 2
    assert plateau.multiplier == 2.0
    for average in (0.79, 0.78, 0.77):  # less than 10%: halved, never under 0.5
        plateau._move(average)
    assert plateau.multiplier == 0.5


def test_the_agreement_probe_sets_its_multiplier_once_from_the_buffers_agreement():
    from lab.probes.agreement_rate import AgreementRate
    from server.strategies import FedBuff
    from server.strategies.base import Buffered

    def run(gradients: list[np.ndarray], updates: int) -> AgreementRate:
        rule = AgreementRate(FedBuff(learning_rate=0.1, k=2), reference=0.45, window=3, low=0.5, high=2.0)
        params = np.zeros(2, dtype=np.float32)
        for _ in range(updates):
            rule.inner.buffer[:] = [Buffered(str(i), 1.0, g, 0.0) for i, g in enumerate(gradients)]
            params = rule.aggregate(params)
        return rule

    assert run([np.ones(2, np.float32)] * 2, 2).multiplier == 1.0  # before the window: the rate as set
    agreeing = run([np.ones(2, np.float32)] * 2, 5)
    assert agreeing.multiplier == 0.5 and agreeing.set_at == (1.0, 0.5)  # ρ̂ 1: halved, the lower bound
    opposed = run([np.array([1, 0.1], np.float32), np.array([-1, 0.1], np.float32)], 5)
    assert opposed.multiplier == 2.0 and opposed.set_at[0] == 0.0  # ρ̂ 0: doubled, the upper bound


def test_the_interval_share_weighs_each_device_by_its_interval_over_the_mean():
    from lab.probes.share_interval import IntervalShare
    from server.strategies.base import Arrival

    def weights(shares: IntervalShare) -> dict[str, float]:
        """Fast arrives every second, slow every third: in a window of 8, 6 fast and 2 slow, mean 1.5."""
        last = {}
        for at in range(1, 62):
            for device in ("fast", "slow") if at % 3 == 0 else ("fast",):
                gradient = np.zeros(1, np.float32)
                last[device] = shares.weight(Arrival("t", device, 0, 0, gradient, None, 1, None, float(at)))
        return last

    first = IntervalShare(cap=4.0, smoothing=0.0)
    assert first.weight(Arrival("t", "new", 0, 0, np.zeros(1, np.float32), None, 1, None, 0.0)) == 1.0
    steady = weights(IntervalShare(cap=4.0, smoothing=0.0, window=8))
    assert steady["fast"] == pytest.approx(1 / 1.5) and steady["slow"] == pytest.approx(3 / 1.5)
    assert weights(IntervalShare(cap=1.5, smoothing=0.0, window=8))["slow"] == 1.5  # bounded by the cap


def test_the_rate_oracle_passes_a_rate_only_within_both_checks():
    from lab.probes.rate_oracle import passes

    assert passes({"ratio": 1.1, "final": 0.915}, 0.92) == (True, True)
    assert passes({"ratio": 1.12, "final": 0.92}, 0.92) == (False, True)
    assert passes({"ratio": None, "final": 0.90}, 0.92) == (False, False)  # target missed, 2 points under
    assert passes(None, 0.92) == (False, False)


def test_a_search_s_runs_are_grouped_without_its_fresh_seeds():
    from lab.probes.adaptive_step import grouped

    def run(seed: int) -> dict[str, object]:
        return {"run": {"workload": "w", "arm": "a", "lr": 1.0, "seed": seed}}

    results = {"summary": {"seeds": {"held_back": [2, 3], "fresh": [6]}}, "runs": [run(2), run(3), run(6)]}
    assert [o["run"]["seed"] for o in grouped(results)["w"]["a", 1.0]] == [2, 3]
    older = {"summary": {"seeds": {"held_back": [2, 3]}}, "runs": [run(2), run(3)]}  # before fresh seeds
    assert len(grouped(older)["w"]["a", 1.0]) == 2


def test_a_rate_added_to_a_workload_is_judged_with_its_runs():
    from lab.probes.model_rate import standing

    def run(times: list[float], accuracy: list[float]) -> dict[str, object]:
        return {"times": times, "accuracy": accuracy, "final": accuracy[-1], "end_time": times[-1],
                "diverged": False}  # fmt: skip

    shipped = [run([1, 2, 3, 4], [0.5, 0.8, 0.91, 0.92])]
    baseline = [run([1, 2, 3, 4], [0.6, 0.85, 0.91, 0.915])]
    added = [run([1, 2, 3, 4], [0.7, 0.92, 0.93, 0.93])]  # sets the best final and the best time
    runs = {("a", 1.0): shipped, ("b", 0.2): baseline}
    rates = {1.0: ("a", 1.0), 0.7: ("a", 0.7), 2.0: ("a", 2.0)}
    best_final, best, cells = standing(runs, rates)
    assert best_final == 0.92 and cells[1.0] == (1.0, 0.92, True) and cells[0.7] is None
    best_final, best, cells = standing({**runs, ("a", 0.7): added}, rates)
    assert best_final == 0.93 and best["lr"] == 0.7
    assert cells[0.7] == (1.0, 0.93, True)
    assert cells[1.0] == (2.0, 0.92, False)  # the target now 0.92: at 4 s against 2 s, and 1 point under
    assert cells[2.0] is None


def test_a_search_s_default_is_read_from_its_results_file():
    from lab.probes.adaptive_step import searched_default

    reported = {
        "default": "a",
        "default_rate": {"mnist_cnn": 0.84, "logreg": 1.2},
        "default_max_step": {"mnist_cnn": 0.03},
    }
    assert searched_default(reported) == ("a", (("mnist_cnn", 0.84, 0.03), ("logreg", 1.2)))
    assert searched_default({"default": "a", "default_rate": 0.3}) == ("a", 0.3)


def test_the_spread_rule_raises_the_rate_only_where_the_staleness_spreads():
    from lab.probes.spread_rate import spread_factor
    from server.strategies.fairness import staleness_spread as dispersion

    equal = [19, 20, 20, 21, 20] * 40  # equal task times: every gradient about τ̄ old
    spread = list(range(4, 44)) * 5  # a 30x spread: fresh gradients from the fast, stale from the slow
    assert dispersion(equal) < 0.2 and spread_factor(equal, 1.0, 2.0) == 1.0
    assert dispersion(spread) == pytest.approx((39.1 - 7.9) / 23.5, abs=0.01)
    assert spread_factor(spread, 1.0, 2.0) == pytest.approx(dispersion(spread))
    assert spread_factor(spread, 0.5, 2.0) == 2.0  # bounded
    assert spread_factor(spread[:199], 0.5, 2.0) == 1.0  # not before the window is full


def test_the_late_rate_probe_multiplies_only_past_its_start():
    from lab.probes.late_rate import multiplier

    assert multiplier("off", 5000, 6000) == 1.0
    assert multiplier("late-0.5-4", 2999, 6000) == 1.0 and multiplier("late-0.5-4", 3000, 6000) == 4.0
    assert multiplier("ramp-0.5-4", 3000, 6000) == 1.0
    assert multiplier("ramp-0.5-4", 4500, 6000) == pytest.approx(2.5)
    assert multiplier("ramp-0.5-4", 6000, 6000) == pytest.approx(4.0)
    for rule in ("step-0.5-4", "late-0.5"):  # refused whenever asked, not only once past the start
        with pytest.raises(ValueError, match="late-F-M"):
            multiplier(rule, 0, 6000)


def test_the_spread_fresh_probe_judges_its_three_ways_among_themselves():
    from lab.probes.spread_fresh import cell, judged

    def run(hit: float, final: float) -> dict:
        return {"times": [1.0, hit, 9.0], "accuracy": [0.5, final, final], "final": final,
                "end_time": 10.0, "diverged": False}  # fmt: skip

    ways = {"shipped": run(4.0, 0.95), "off": run(6.0, 0.94), "off-x2": run(4.2, 0.9)}
    verdict = judged({rule: [output] * 3 for rule, output in ways.items()})
    assert verdict["target"] == 0.94 and verdict["best"]["arm"] == "shipped"
    runs = verdict["runs"]
    assert runs["shipped@1.0"]["passes"] and not runs["off@1.0"]["passes"]  # 1.5x the fastest, 1 point under
    assert runs["off-x2@2.0"]["time"] is None and not runs["off-x2@2.0"]["passes"]  # never reaches 0.94
    assert cell(runs["shipped@1.0"]) == "**4.0 s (1.00x), 0.950**"
    assert cell(runs["off-x2@2.0"]) == "miss, 0.900"
