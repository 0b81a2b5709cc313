"""Quick modes of the experiments: each writes its PNG, JSON (with ``summary``) and markdown table."""

from __future__ import annotations

import json

import pytest

from experiments import EXPERIMENTS, run_experiment


def outputs_exist(out, name: str) -> dict:
    for ext in ("png", "json", "md"):
        assert (out / f"{name}.{ext}").stat().st_size > 0
    return json.loads((out / f"{name}.json").read_text())


def test_registry_names_every_experiment():
    assert {"staleness", "long-tail", "iid", "pruning", "async-vs-sync"} <= set(EXPERIMENTS)


@pytest.mark.timeout(120)
def test_staleness_quick_orders_strategies(tmp_path):
    run_experiment("staleness", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "staleness")
    rows = data["summary"]["tables"]["D2/a"]
    final = {v: r["final_accuracy"][0] for v, r in rows.items()}
    # 100 updates under D2 are too few to separate the async strategies robustly (all near 10%); the
    # full run's tuning shows FedAvg-async failing at 0.4 (10% after 3,000 updates). Checked here: SSGD.
    for row in rows.values():  # the status column agrees with the curve it summarises
        for status, hit in zip(row["status"], row["per_seed"], strict=True):
            assert (status == "reached") == (hit is not None)
    assert rows["ssgd"]["status"] == ["reached"]
    # SSGD (no staleness) needs the fewest updates, and computes more gradients than it makes updates
    assert final["ssgd"] >= max(final["adasgd"], final["dynsgd"])
    assert rows["ssgd"]["gradients"]["median"] > rows["dynsgd"]["gradients"]["median"]


@pytest.mark.timeout(120)
def test_long_tail_quick_writes_recall_and_weights(tmp_path):
    data = run_experiment("long-tail", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "long-tail")
    for v in ("adasgd", "dynsgd"):
        series = data["series"][v]
        assert len(series["recall0"]) == len(series["updates"]) and series["weights"]
        assert 48 in series["staleness"]
    assert data["summary"]["tau_thres"] == 12.0


@pytest.mark.timeout(120)
def test_pruning_quick_drops_about_the_asked_fraction(tmp_path):
    data = run_experiment("pruning", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "pruning")
    rows = {r["p"]: r for r in data["summary"]["rows"]}
    assert rows[0.0]["fraction_dropped"]["median"] == 0.0
    assert 0.25 < rows[0.392]["fraction_dropped"]["median"] < 0.5


@pytest.mark.timeout(150)
def test_async_vs_sync_quick_has_staleness_only_where_async(tmp_path):
    data = run_experiment("async-vs-sync", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "async-vs-sync")
    table = data["summary"]["tables"]["a"]["arms"]
    assert table["ssgd-wait-all"]["staleness_median"] == [0.0]
    assert table["adasgd"]["staleness_median"][0] > 0
    assert 0.0 <= data["summary"]["sim_overhead_1000_devices"]["share"] < 1.0
