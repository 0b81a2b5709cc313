"""The device worker's loop (client/_worker.py) against a tiny ONNX training graph and an in-process mock
server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from client import (
    WorkerConfig,
    WorkerError,
    run_worker,
)
from client._energy import EnergyModel
from tests.support.client_doubles import KEY, FakeServer, make_data, make_worker, numpy_reference, rejection

ROOT = Path(__file__).resolve().parents[1]

# --- the worker ---------------------------------------------------------------------------------------


def test_run_one_end_to_end(tiny):
    server = FakeServer(*tiny)
    with make_worker(server) as worker:
        report = worker.run_one()
        assert server.calls[:2] == [("POST", "/v1/devices"), ("GET", "/v1/models/active")]
        assert len(server.pushes) == 1 and server.pushes[0]["gradient"].shape == (tiny[0].num_params,)
        assert (report.task_id, report.version, report.current_version, report.batch_size) == ("t1", 3, 4, 16)
        assert report.staleness == 0 and report.weight == 1.0 and report.predicted_time_ms == 120.0
        assert report.loss == pytest.approx(server.pushes[0]["meta"]["loss"])
        assert report.energy_source == "model" and report.energy == pytest.approx(
            server.pushes[0]["meta"]["energy"]
        )
        assert report.compute_time_ms == server.pushes[0]["meta"]["compute_time_ms"] > 0
        worker.run_one()  # second task: params, manifest and graph come from the caches
    assert server.calls.count(("GET", "/v1/models/m1/versions/3/params")) == 1
    assert server.calls.count(("GET", "/v1/models/m1/graphs/train.onnx")) == 1
    assert server.calls.count(("POST", "/v1/devices")) == 1


def test_gradient_pushed_is_the_gradient_of_the_sampled_batch(tiny):
    server = FakeServer(*tiny, batch_size=8)
    data = make_data(20)
    make_worker(server, data=data, seed=11).run_one()
    x, y = data.batch(8, np.random.default_rng(np.random.SeedSequence(11).spawn(2)[0]))
    _, ref = numpy_reference(server.params[3], x, y, 10)
    np.testing.assert_allclose(server.pushes[0]["gradient"], ref, rtol=1e-4, atol=1e-6)


def test_a_task_computes_at_most_the_examples_held_and_says_so(tiny):
    server = FakeServer(*tiny, batch_size=1000)  # the operator's phone: 2 drawings, a grant of 1,000
    data = make_data(2)
    report = make_worker(server, data=data).run_one()
    meta = server.pushes[0]["meta"]
    assert report.batch_size == meta["batch_size"] == sum(meta["label_counts"]) == 2
    _, ref = numpy_reference(server.params[3], data.x, data.y, 10)  # each example once: the exact mean
    np.testing.assert_allclose(server.pushes[0]["gradient"], ref, rtol=1e-4, atol=1e-6)


def test_min_ms_per_sample_stretches_compute_time(tiny):
    server = FakeServer(*tiny, batch_size=10)
    report = make_worker(server, min_ms_per_sample=5.0).run_one()
    assert report.compute_time_ms >= 50.0
    assert report.energy >= EnergyModel().energy(0.05) * 0.99  # the emulated phone was busy meanwhile


@pytest.mark.parametrize("knob", ["min_ms_per_sample", "delay_ms_per_sample"])
def test_the_emulated_phone_stretches_the_examples_really_computed(tiny, knob):
    server = FakeServer(*tiny, batch_size=1000)  # 1,000 granted, 3 held: 3 x 100 ms, not 100 s
    report = make_worker(server, data=make_data(3), **{knob: 100.0}).run_one()
    assert report.batch_size == 3 and 300.0 <= report.compute_time_ms < 5000.0
    assert report.energy >= EnergyModel().energy(0.3) * 0.99  # charged for the 3 examples' stretched time


def test_push_is_retried_with_the_same_body(tiny):
    server = FakeServer(*tiny)
    server.push_failures = 1
    report = make_worker(server).run_one()
    assert report.task_id == "t1" and len(server.pushes) == 1
    assert server.calls.count(("POST", "/v1/tasks/t1/result")) == 2


def test_run_loops_with_backoff_until_training_finishes(tiny):
    server = FakeServer(
        *tiny,
        script=[
            rejection("paused", 2.0),
            httpx.Response(500, json={"detail": "db"}),
            rejection("small_batch", 1e6),
        ],
    )
    grants = 2
    slept: list[float] = []
    reports = []
    worker = make_worker(server, max_retry_after=30.0, backoff_initial=1.0, backoff_max=8.0)
    worker.sleep = slept.append
    worker.on_report = reports.append

    original = server.task

    def task(body):
        nonlocal grants
        if not server.script and grants == 0:
            return rejection("training_finished", 0.0, status=410)
        if not server.script:
            grants -= 1
        return original(body)

    server.task = task
    summary = worker.run()
    assert summary.finished and summary.stop_reason == "training_finished"
    assert summary.tasks == 2 and len(reports) == 2 and summary.errors == 1
    assert summary.rejections == {"paused": 1, "small_batch": 1}
    assert slept[0] == 2.0 and 0.5 <= slept[1] <= 1.0 and slept[2] == 30.0  # retry_after capped


def test_run_stops_on_max_tasks_and_stop_event(tiny):
    server = FakeServer(*tiny)
    summary = make_worker(server, max_tasks=3).run()
    assert summary.tasks == 3 and summary.stop_reason == "max_tasks" and not summary.finished
    stop = threading.Event()
    worker = make_worker(FakeServer(*tiny))
    worker.on_report = lambda report: stop.set()
    assert worker.run(stop).tasks == 1
    server = FakeServer(*tiny, script=[rejection("paused", 100.0)])
    waits: list[float] = []

    class InstantEvent(threading.Event):
        """Records each wait and returns at once: the check is on what was asked, not on the clock."""

        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return super().wait(0)

    summary = make_worker(server, max_seconds=0.2).run(InstantEvent())
    assert summary.stop_reason == "max_seconds" and summary.elapsed_s >= 0.2
    assert waits and max(waits) <= 0.2  # the server's 100 s retry_after is capped by max_seconds


def test_run_reenrolls_on_401_and_gives_up_on_repeated_errors(tiny):
    server = FakeServer(*tiny)
    worker = make_worker(server, max_tasks=1)
    worker.run_one()
    server.tokens, server.issue = {"new-token"}, "new-token"  # the server forgot the device
    assert worker.run().tasks == 1 and worker.api.token == "new-token"
    assert server.calls.count(("POST", "/v1/devices")) == 2
    bad = make_worker(FakeServer(*tiny), max_consecutive_errors=3)
    bad.config = WorkerConfig(**{**bad.config.__dict__, "enrollment_key": "wrong"})
    with pytest.raises(WorkerError, match="bad enrollment key"):
        bad.run()


def test_run_worker_is_what_the_cli_calls(tiny, tmp_path):
    np.savez(tmp_path / "shard.npz", x=np.zeros((20, 1, 28, 28), np.uint8), y=np.arange(20) % 10)
    server = FakeServer(*tiny)
    seen = []
    config = WorkerConfig(
        base_url="http://fleet.test", enrollment_key=KEY, data=tmp_path / "shard.npz", max_tasks=2
    )
    summary = run_worker(config, on_report=seen.append, transport=httpx.MockTransport(server))
    assert summary.tasks == 2 and [r.task_id for r in seen] == ["t1", "t2"]


def test_a_full_task_never_imports_torch_sklearn_or_fastapi(tiny, tmp_path):
    manifest, graph = tiny
    (tmp_path / "manifest.json").write_text(manifest.to_json())
    (tmp_path / "train.onnx").write_bytes(graph)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import httpx, numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        import client
        from models.manifest import Manifest
        from tests.support import client_doubles as tc
        folder = Path({str(tmp_path)!r})
        server = tc.FakeServer(Manifest.from_json((folder / "manifest.json").read_text()),
                               (folder / "train.onnx").read_bytes())
        config = client.WorkerConfig(base_url="http://fleet.test", enrollment_key=tc.KEY, data=tc.make_data(),
                                     max_tasks=1)
        with client.Worker(config, transport=httpx.MockTransport(server)) as worker:
            summary = worker.run()
        assert summary.tasks == 1 and len(server.pushes) == 1, summary
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "sklearn", "fastapi", "server",
                                                                        "profiler", "onnx"))
        print("HEAVY", heavy)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
