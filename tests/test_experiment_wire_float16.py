"""The float16 wire experiment runs paired seeds and writes its plot, JSON and table."""

from __future__ import annotations

import json

import pytest

from experiments import run_experiment

pytestmark = pytest.mark.slow


def test_quick_run_writes_paired_results(tmp_path):
    result = run_experiment("wire-float16", quick=True, out_dir=tmp_path)
    summary = result["summary"]
    assert summary["seeds"] == [0, 1] and summary["updates"] == 150
    for series in result["series"].values():
        assert len(series["float32"]) == len(series["float16"]) == 3
    assert abs(summary["loss_points_mean"]) < 10  # float16 rounding must not wreck training
    assert json.loads((tmp_path / "wire-float16-quick.json").read_text())["summary"] == summary
    assert (tmp_path / "wire-float16-quick.png").stat().st_size > 1000
    assert "paired" in (tmp_path / "wire-float16-quick.md").read_text().lower()
