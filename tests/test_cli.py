"""The `fleet` command line: help, data preparation, model export, worker argument checks."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from fleet.cli import app
from models.manifest import Bundle

runner = CliRunner()


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "worker", "demo", "model", "data"):
        assert command in result.output


def test_experiment_and_bench_point_to_the_lab(monkeypatch):
    """The wheel never imports the lab: outside a checkout `fleet experiment` / `fleet bench` only say
    where they went."""
    import fleet.cli

    monkeypatch.setattr(fleet.cli, "checkout_root", lambda: None)
    for command in (["experiment", "staleness", "--quick"], ["bench", "all"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and "python -m lab run" in result.output
    audit = runner.invoke(app, ["bench", "privacy-audit"])  # issue 27: the audit's own pointer
    assert audit.exit_code == 2 and "python -m lab run privacy-audit" in audit.output


def test_experiment_runs_the_lab_as_its_own_process_from_a_checkout():
    import fleet.cli

    assert fleet.cli.checkout_root() is not None  # the tests run from the checkout
    result = runner.invoke(app, ["experiment", "no-such-experiment"])
    assert result.exit_code not in (0, 2)  # the lab itself refused the name


def test_data_prepare_writes_non_iid_shards(tmp_path):
    result = runner.invoke(app, ["data", "prepare", "--devices", "5", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    shards = sorted(tmp_path.glob("device_*.npz"))
    assert len(shards) == 5
    labels = [np.load(p)["y"] for p in shards]
    assert sum(len(y) for y in labels) == 4000
    assert all(len(np.unique(y)) <= 4 for y in labels)  # 2 sorted shards of 400: at most 4 classes each
    assert len(np.unique(np.concatenate(labels))) == 10
    with np.load(tmp_path / "test.npz") as test:
        assert test["x"].shape == (1000, 1, 28, 28) and test["x"].min() >= 0.0 and test["x"].max() <= 1.0


@pytest.mark.slow  # a torch export or a benchmark run: the slow tier
def test_model_export_writes_a_loadable_bundle(tmp_path):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["model", "export", "mlp", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    bundle = Bundle.load(tmp_path / "mlp")
    assert bundle.manifest.num_params == 101_770


def test_worker_needs_an_enrollment_key(tmp_path, monkeypatch):
    monkeypatch.delenv("FLEET_ENROLLMENT_KEY", raising=False)
    result = runner.invoke(app, ["worker", "--data", str(tmp_path / "x.npz")])
    assert result.exit_code != 0
    assert "enrollment-key" in result.output
