"""`fleet simulate --backend ray`: the same simulation as the local backend, computed on Ray actors.

One local Ray cluster (2 CPUs) serves the whole module: starting Ray costs seconds.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from fleet.cli import app
from sim.backends import BackendUnavailable, LocalBackend, make_backend
from sim.scenario import Scenario, build, run_scenario, workbench

pytestmark = pytest.mark.slow  # Ray starts a local cluster: the slow tier

runner = CliRunner()
SMALL = Scenario(
    devices=300, gradients=300, seed=3, mean_online=60.0, mean_offline=120.0, churn=0.2, eval_every=100
)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_backend_matches_local_for_the_same_seed(ray_cluster):
    local = run_scenario(SMALL, backend="local")
    remote = run_scenario(SMALL, backend="ray", workers=2, chunk=4)
    assert remote["workers"] == 2
    assert remote["gradients"] == local["gradients"] == SMALL.gradients
    assert remote["applied_updates"] == local["applied_updates"]
    assert remote["joined_by_churn"] == local["joined_by_churn"] > 0  # churn happened, identically
    assert remote["staleness_median"] == local["staleness_median"]
    assert len(remote["accuracy_curve"]) == len(local["accuracy_curve"])
    np.testing.assert_allclose(remote["accuracy_curve"], local["accuracy_curve"], atol=0.02)
    assert remote["backend_stats"]["calls"] < remote["gradients"]  # chunked: fewer calls than gradients


def test_ray_gradients_equal_local_ones_within_float_tolerance_across_two_runs(ray_cluster):
    bench = workbench("mnist_cnn")
    scenario = Scenario(devices=50, gradients=60, seed=5)
    params = {}
    for name in ("local", "ray"):
        backend = make_backend(name, bench, workers=2, chunk=3)
        try:
            sim = build(scenario, bench, backend)
            sim.run(max_gradients=scenario.gradients // 2)  # a second run continues the tasks in flight
            assert sim.run(max_gradients=scenario.gradients).gradients == scenario.gradients
        finally:
            backend.close()
        params[name] = sim.core.run.params.copy()
    np.testing.assert_allclose(params["ray"], params["local"], rtol=1e-4, atol=1e-5)


def test_cli_simulate_runs_on_ray_and_rejects_ray_options_without_it(ray_cluster, tmp_path):
    out = tmp_path / "run.json"
    args = ["simulate", "--devices", "40", "--gradients", "30", "--backend", "ray", "--ray-workers", "2"]
    done = runner.invoke(app, [*args, "--ray-chunk", "2", "--json", str(out)])
    assert done.exit_code == 0, done.output
    assert "applied_updates: 30" in done.output and out.exists()
    wrong = runner.invoke(app, ["simulate", "--ray-workers", "2"])
    assert wrong.exit_code == 2 and "--backend ray" in wrong.output
    bogus = runner.invoke(app, ["simulate", "--backend", "dask"])
    assert bogus.exit_code == 2 and "local, ray" in bogus.output


def test_cli_simulate_local_is_the_default():
    done = runner.invoke(app, ["simulate", "--devices", "20", "--gradients", "10", "--seed", "1"])
    assert done.exit_code == 0, done.output
    assert "backend: local" in done.output and "gradients: 10" in done.output


def test_missing_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(BackendUnavailable, match=r"pip install -e \.\[ray\]"):
        make_backend("ray", workbench("mnist_cnn"))
    done = runner.invoke(app, ["simulate", "--backend", "ray", "--devices", "5", "--gradients", "2"])
    assert done.exit_code == 1
    assert "pip install -e .[ray]" in done.output
    assert isinstance(make_backend("local", workbench("mnist_cnn")), LocalBackend)


def test_server_client_and_local_simulator_never_import_ray():
    code = (
        "import sys, server.api.app, client, fleet.cli;"
        "import sim.fleet, sim.backends, sim.scenario, sim.ray_backend;"
        "print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
