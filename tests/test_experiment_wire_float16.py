"""The float16 wire experiment: the float16 arm really rounds what crosses the wire, the float32 arm does
not, and the quick run trains, pairs its seeds and reports what its series say."""

from __future__ import annotations

import json

import numpy as np
import pytest

from client import GradientSession
from lab.experiments import run_experiment, wire_float16
from server.strategies import AdaSGD

pytestmark = pytest.mark.slow  # an experiment's training runs: the slow tier


def is_float16_exact(values: np.ndarray) -> bool:
    """True when every value survives a float16 round trip, i.e. it is what a float16 wire delivers."""
    return bool(np.array_equal(values, values.astype(np.float16).astype(np.float32)))


@pytest.mark.parametrize("float16", [True, False])
def test_only_the_float16_arm_rounds_pulled_params_and_pushed_gradients(monkeypatch, float16):
    """What the experiment claims to compare: the arms differ exactly in the wire's rounding, on the way
    to the device and on the way into the coordinator core's strategy."""
    pulled: list[np.ndarray] = []
    pushed: list[np.ndarray] = []

    class RecordingSession(GradientSession):
        def loss_and_gradient(self, flat_params, x, y):  # type: ignore[no-untyped-def]
            pulled.append(np.array(flat_params))
            return super().loss_and_gradient(flat_params, x, y)

    receive = AdaSGD.receive

    def recording_receive(self, arrival):  # type: ignore[no-untyped-def]
        pushed.append(np.array(arrival.gradient))
        return receive(self, arrival)

    monkeypatch.setattr(wire_float16, "GradientSession", RecordingSession)
    monkeypatch.setattr(AdaSGD, "receive", recording_receive)  # the core's strategy, built by compose
    wire_float16.train(seed=0, updates=12, float16=float16)

    assert len(pulled) == len(pushed) == 12
    # the initial model is float16-exact in neither arm, so the first pull tells the arms apart
    assert [is_float16_exact(p) for p in pulled] == [float16] * 12
    assert [is_float16_exact(g) for g in pushed] == [float16] * 12


@pytest.mark.slow
def test_quick_run_trains_and_reports_its_paired_series(tmp_path):
    result = run_experiment("wire-float16", quick=True, out_dir=tmp_path)
    summary, series = result["summary"], result["series"]
    assert summary["seeds"] == [0, 1] and summary["updates"] == 150
    for runs in series.values():
        for accuracy in runs.values():
            assert len(accuracy) == 3  # an evaluation every 50 updates
            # both arms learn: well above chance (0.1) after 150 updates, and better than at 50
            assert accuracy[-1] > 0.5 and accuracy[-1] > accuracy[0] + 0.1, runs
    # the summary is the paired difference of the series' last-three means, in points
    differences = [
        (np.mean(runs["float32"][-3:]) - np.mean(runs["float16"][-3:])) * 100 for runs in series.values()
    ]
    assert summary["loss_points_mean"] == pytest.approx(np.mean(differences), abs=1e-9)
    assert summary["loss_points_range"] == pytest.approx([min(differences), max(differences)], abs=1e-9)
    assert summary["met"] == (summary["loss_points_mean"] < summary["target_points"])
    # float16 rounding costs little on paired seeds (full run: under 0.4 points per seed)
    assert max(abs(d) for d in differences) < 1.5, differences
    assert json.loads((tmp_path / "wire-float16-quick.json").read_text())["summary"] == summary
    assert (tmp_path / "wire-float16-quick.png").stat().st_size > 1000
    table = (tmp_path / "wire-float16-quick.md").read_text()
    assert "paired" in table.lower() and f"{summary['loss_points_mean']:+.2f}" in table
