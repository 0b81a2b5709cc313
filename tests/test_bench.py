"""The benchmarks run end to end in quick mode and write their table (numbers are not asserted here)."""

from __future__ import annotations

import json

import pytest

from lab.bench import run_benchmarks
from lab.bench.memory import installed_mb
from tests.test_openapi import STATUSES  # every documented operation

pytestmark = pytest.mark.slow


def test_wire_and_gradient_benchmarks_write_the_table(tmp_path):
    pytest.importorskip("torch")
    results = run_benchmarks(["wire", "gradient"], quick=True, out_dir=tmp_path)
    wire = results["benchmarks"]["wire"]["table"]
    assert {(r["model"], r["encoding"]) for r in wire} == {
        (m, e) for m in ("mnist_cnn", "mlp") for e in ("float32", "float16")
    }
    for row in wire:  # float16 moves about half the bytes of float32, per model and direction
        twin = next(r for r in wire if r["model"] == row["model"] and r["encoding"] != row["encoding"])
        if row["encoding"] == "float16":
            assert row["pull bytes/task"] < 0.55 * twin["pull bytes/task"]
    gradient = results["benchmarks"]["gradient"]["table"]
    assert {(r["model"], r["threads"]) for r in gradient} == {
        (m, t) for m in ("mnist_cnn", "mlp") for t in (1, 2)
    }
    for row in gradient:  # the two timed computations compute the same gradient at the same point
        assert row["max abs Δ gradient"] < 1e-5
        # the ratio is rounded to 3 decimals
        assert row["ratio"] == pytest.approx(row["onnxruntime_ms"] / row["torch_ms"], rel=0.01, abs=1e-3)
    assert json.loads((tmp_path / "performance-quick.json").read_text())["benchmarks"].keys() == {
        "wire",
        "gradient",
    }
    assert "Wire size" in (tmp_path / "performance-quick.md").read_text()


def test_client_dependencies_do_not_include_torch():
    sizes = installed_mb()
    assert {"numpy", "onnxruntime", "httpx", "psutil"} <= set(sizes)
    assert "torch" not in sizes and "scikit-learn" not in sizes


def test_asgi_layer_runs_real_cycles_through_the_app():
    """bench.asgi drives the real app (its default strategy): every push of the warm-up and timed cycles
    reaches the buffer, K of them make a version."""
    from lab.bench.asgi import asgi_run
    from server.strategies import DEFAULT_STRATEGY, make_strategy

    run = asgi_run("mnist_cnn", devices=3, cycles=2)
    assert run["version"] == 3 * (1 + 2) // make_strategy(DEFAULT_STRATEGY).k


def test_asgi_layers_split_the_cycle_cpu():
    """bench.asgi's per-layer CPU: every route and inner layer measured, and the instruments removed after."""
    from lab.bench.asgi import asgi_run
    from server.api.routes import tasks

    decode = tasks.decode_tensor
    run = asgi_run("mnist_cnn", devices=3, cycles=2, layers=True)
    layers = run["layers_us"]
    from server.strategies import DEFAULT_STRATEGY, make_strategy

    assert run["version"] == 3 * (1 + 2) // make_strategy(DEFAULT_STRATEGY).k
    assert tasks.decode_tensor is decode
    for layer in (
        "route: request",
        "route: pull",
        "route: push",
        "core: apply (submit_nowait)",
        "push: digest (sha256)",
        "metrics (prometheus)",
        "thread: journal writer",
    ):
        assert layers[layer] > 0, layer
    assert layers["route: push"] > layers["core: apply (submit_nowait)"]
    assert layers["process total"] >= layers["thread: event loop"]


def test_simulator_benchmark_runs_the_asked_number_of_events():
    from lab.bench.simulator import measure

    row = measure(1_000, 300)
    assert row["events"] == 300 and row["gradients"] > 0


def test_fuzz_report_quick_writes_its_results(tmp_path):
    """`python -m lab run fuzz --quick`: schemathesis against a live server, counts in fuzz-quick.md/.json."""
    from lab.bench import run_report
    from lab.runner import BENCHMARKS as REPORTS

    assert REPORTS["fuzz"] == "lab.bench.fuzz"
    result = run_report("fuzz", quick=True, out_dir=tmp_path)
    run = result["runs"]["sqlite"]
    operations = len(STATUSES)  # every documented operation (tests/test_openapi.py)
    assert run["operations"] == operations and run["requests"] >= operations and run["server_errors"] == 0
    assert run["failures"] == [] and sum(run["status_counts"].values()) == run["requests"]
    saved = json.loads((tmp_path / "fuzz-quick.json").read_text())
    assert saved["schemathesis"] == result["schemathesis"]
    assert saved["command"] == "python -m lab run fuzz --quick"
    assert f"| sqlite | {operations} |" in (tmp_path / "fuzz-quick.md").read_text()


def test_quick_soak_writes_its_figures_and_the_report(tmp_path):
    from lab.bench import run_report

    result = run_report("soak", quick=True, out_dir=tmp_path)
    assert result["answers_5xx"] == 0 and result["exactly_once"] and result["acknowledged"] > 50
    assert 20 < result["rss_mib"]["start"] < 2000 and result["rss_mib"]["end"] > 20
    report = (tmp_path / "reliability-quick.md").read_text()
    assert f"| gradients acknowledged | {result['acknowledged']:,} " in report
    assert "Not run yet: `python -m lab run chaos`" in report
    saved = json.loads((tmp_path / "reliability-soak-quick.json").read_text())
    assert saved["summary"] == result["summary"]["text"] and "plot" not in saved  # no plot in quick mode
    assert not (tmp_path / "reliability-soak-quick.png").exists()


def test_dp_overhead_benchmark_runs_in_quick_mode(tmp_path):
    """`python -m lab run dp --quick`: both models and thread counts, own files; the next performance run
    shows them as its section "dp"."""
    from lab.bench import run_report
    from lab.runner import BENCHMARKS as REPORTS

    assert REPORTS["dp"] == "lab.bench.dp_overhead"
    result = run_report("dp", quick=True, out_dir=tmp_path)
    assert {(r["model"], r["threads"]) for r in result["table"]} == {
        (m, t) for m in ("mnist_cnn", "mlp") for t in (1, 2)
    }
    for row in result["table"]:
        assert row["max abs Δ (C = ∞, sum vs B × mean)"] < 1e-4
        assert row["ratio"] == pytest.approx(row["clipped_ms"] / row["plain_ms"], rel=0.01, abs=1e-3)
    assert (tmp_path / "dp-overhead-quick.json").exists()
    assert "# DP-SGD overhead" in (tmp_path / "dp-overhead-quick.md").read_text()
    assert not (tmp_path / "performance-quick.json").exists()  # the runner writes only dp's own files
    performance = run_benchmarks([], quick=True, out_dir=tmp_path)  # runs none, reads dp's record
    assert performance["benchmarks"]["dp"]["table"] == result["table"]
    assert "DP-SGD clipped-gradient overhead" in (tmp_path / "performance-quick.md").read_text()
