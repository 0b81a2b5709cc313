"""Issue 27's accounting findings, one regression test each (every one failed on the code before it):
δ is one fixed setting refused at or above 1/N (9), N drifts only within a factor of the first N (14),
an exact, non-bucket N is refused under DP (3), the 'paper' norm-Laplace sampler is refused under DP (6),
several API processes with DP are refused (11)."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
from typer.testing import CliRunner

from client import DeviceData, Worker, WorkerConfig
from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent, bucket_examples
from server.core.errors import InvalidInput
from server.core.privacy import PrivacyLedger, PrivacyPolicy, Refusal
from server.core.types import Rejection, TaskGrant
from server.settings import Settings, with_overrides
from tests.conftest import ADMIN, ENROLL, FEATURES
from tests.memory_store import MemoryStore
from tests.test_privacy_ledger import ask, dp_core, reference_epsilon
from tests.test_privacy_pure import strategy_core


# -- finding 9: δ = 1/N² was weak and moved with N --------------------------------------------------
def test_delta_is_one_setting_whatever_n_and_the_epsilon_follows_only_q():
    ledger = PrivacyLedger(PrivacyPolicy(noise_multiplier=2.0))
    small, large = ledger.terms("a", 200, 50), ledger.terms("b", 400, 100)  # the same q = 1/4
    assert small["delta"] == large["delta"] == DEFAULT_DELTA == 1e-8
    assert small["epsilon_after"] == large["epsilon_after"]  # 1/N² gave the larger N a smaller ε
    assert small["epsilon_after"] == pytest.approx(
        reference_epsilon([PrivacyEvent(2.0, 0.25)], 1e-8), rel=1e-6
    )


def test_a_grant_is_refused_when_delta_is_not_below_one_over_n():
    store = MemoryStore()
    delta = 2.0**-10  # N = 1024, a bucket value, makes δ·N exactly 1
    core = dp_core(store, PrivacyPolicy(delta=delta, epsilon_budget=None))
    device, _ = core.enroll("Pixel")
    grant = ask(core, device, 512)  # δ·N = 0.5
    assert isinstance(grant, TaskGrant) and grant.dp["delta"] == delta
    other, _ = core.enroll("Pixel")
    refused = ask(core, other, 1024)  # δ = 1/N: one example in N may leak
    assert isinstance(refused, Rejection) and refused.reason == "delta_too_large", refused
    assert "1/N" in refused.detail
    core.journal.flush()
    assert [c.device_id for c in store.privacy_charges()] == [device.device_id]


def test_the_delta_setting_defaults_to_1e_8_and_refuses_values_outside_0_1():
    assert Settings(_env_file=None).dp_delta == DEFAULT_DELTA
    for bad in (0.0, 1.0, 2.0, -1e-9):
        with pytest.raises(pydantic.ValidationError, match="dp_delta"):
            Settings(_env_file=None, dp_delta=bad)


# -- finding 14: N walked from 1,000 to 260,080 in 8 grants (2N + 16 each time) --------------------------
def test_n_cannot_walk_upward_by_steps_each_within_the_tolerance():
    store = MemoryStore()
    core = dp_core(store, PrivacyPolicy(examples_tolerance=2.0, epsilon_budget=None))
    device, _ = core.enroll("Pixel")
    n, granted = 1024, []  # a DP device reports bucket values of N, so the walk goes over buckets
    for _ in range(8):
        try:
            assert isinstance(ask(core, device, n), TaskGrant)
        except InvalidInput as refused:
            assert "first reported" in str(refused)
            break
        granted.append(n)
        n = bucket_examples(3 * n // 2)  # each step 1.5x: within the 2x tolerance of the N before it
    assert granted == [1024, 1536], granted  # 2304 is more than 2x the first N
    for slow in (1920, 2048):  # small steps within 2x of the first N are fine (2x itself too) ...
        assert isinstance(ask(core, device, slow), TaskGrant)
    with pytest.raises(InvalidInput):  # ... but the total drift is bounded, not each step
        ask(core, device, 2304)  # the next bucket above 2x
    core.close()
    restarted = dp_core(store, core.privacy_policy)  # the anchor is the first charge's N, from storage
    with pytest.raises(InvalidInput, match="away from 1024"):
        ask(restarted, device, 2304)
    assert isinstance(ask(restarted, device, 512), TaskGrant)
    with pytest.raises(InvalidInput):
        ask(restarted, device, 480)  # the next bucket below 1/2x


# -- finding 3: the exact N went out with every request and told D from D ∪ {x} --------------------------
def test_a_dp_request_with_the_exact_n_is_refused_and_the_real_worker_is_granted(make_api):
    """An honest DP device reports ``bucket_examples(N)``; an exact N is a leak the coordinator refuses
    (422 naming the bucket, nothing charged), while the real client Worker holding N = 200 is granted."""
    api = make_api(dp=True, dp_epsilon_budget=None, initial_model="logreg", min_batch=16, max_batch=16)
    device = api.enroll()
    for exact in (200, 201):  # 201 = 200 plus one example: the same bucket, so neither may go out
        body = {"features": FEATURES, "local_examples": exact}
        refused = api.http.post("/v1/tasks", json=body, headers=device)
        assert refused.status_code == 422, refused.text
        assert (
            "bucket" in refused.json()["detail"] and str(bucket_examples(exact)) in refused.json()["detail"]
        )
    assert api.http.get("/v1/privacy/me", headers=device).json()["tasks"] == 0
    rng = np.random.default_rng(0)
    data = DeviceData(rng.uniform(0, 1, (200, 1, 28, 28)).astype(np.float32), np.arange(200) % 10)
    config = WorkerConfig(base_url=str(api.http.base_url), enrollment_key=ENROLL, data=data, seed=0)
    with Worker(config, client=api.http) as worker:
        assert worker.run_one().applied
    overview = api.http.get("/v1/admin/privacy", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    devices = overview["devices"]  # the worker's own device: the one charged
    assert [(d["tasks"], d["local_examples"]) for d in devices] == [(1, bucket_examples(200))] == [(1, 192)]


# -- finding 6: the 'paper' norm-Laplace sampler charged as ε-DP -------------------------------------------
@pytest.mark.parametrize("strategy", ["audp", "mapa"])
def test_the_paper_sampler_is_a_settings_error_with_dp_on_and_the_strategy_one_without(strategy):
    with pytest.raises(pydantic.ValidationError, match="'paper' noise sampler"):
        Settings(_env_file=None, dp=True, strategy=strategy, dp_noise_sampler="paper")
    with pytest.raises(pydantic.ValidationError, match="FLEET_DP"):  # without DP: refused for needing it
        Settings(_env_file=None, dp=False, strategy=strategy, dp_noise_sampler="paper")
    assert Settings(_env_file=None, dp=True, strategy=strategy, dp_noise_sampler="exact").dp
    running = Settings(_env_file=None, dp=True, strategy=strategy)
    with pytest.raises(pydantic.ValidationError, match="paper"):  # nor may the console switch to it
        with_overrides(running, {"strategy": f'{{"name": "{strategy}", "dp_noise_sampler": "paper"}}'})


def test_the_ledger_grants_no_paper_sampler_step_whatever_built_the_core():
    core = strategy_core(
        MemoryStore(), PrivacyPolicy(), "mapa", mapa_sensitivity=10.0, dp_noise_sampler="paper"
    )
    device, _ = core.enroll("Pixel")
    answer = ask(core, device, 192)
    assert isinstance(answer, Rejection) and answer.reason == "dp_sampler_not_private", answer
    assert core.privacy.device_view(device.device_id)["tasks"] == 0
    refusal = PrivacyLedger(PrivacyPolicy()).pure_terms("d", 200, {"noise": "paper", "epsilon_step": 0.1})
    assert isinstance(refusal, Refusal)


# -- finding 11: `fleet serve --workers N` gave each process its own ledger ----------------------------------
def test_serve_refuses_several_api_processes_with_dp(monkeypatch, tmp_path):
    import uvicorn

    from fleet.cli import app

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: started.append(k))
    monkeypatch.chdir(tmp_path)  # no .env
    runner = CliRunner()
    env = {"FLEET_DP": "true", "FLEET_DATA_DIR": str(tmp_path)}
    refused = runner.invoke(app, ["serve", "--workers", "3"], env=env)
    assert refused.exit_code == 2 and "privacy" in refused.output and started == []
    assert runner.invoke(app, ["serve", "--workers", "1"], env=env).exit_code == 0
    assert runner.invoke(app, ["serve", "--workers", "3"], env={**env, "FLEET_DP": "false"}).exit_code == 0
    assert [k["workers"] for k in started] == [1, 3]


def test_the_scale_out_topology_refuses_dp(tmp_path, monkeypatch):
    from fleet.topology import Topology

    monkeypatch.delenv("FLEET_DP", raising=False)
    with pytest.raises(ValueError, match="privacy ledger"):
        Topology(tmp_path, "postgresql://unused/fleet", dp="true")
    monkeypatch.setenv("FLEET_DP", "1")
    with pytest.raises(ValueError, match="privacy ledger"):
        Topology(tmp_path, "postgresql://unused/fleet")
    monkeypatch.setenv("FLEET_DP", "false")
    Topology(tmp_path, "postgresql://unused/fleet")  # builds nothing until start()
