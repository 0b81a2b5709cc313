"""Issue 27's accounting findings, one regression test each (every one failed on the code before it):
δ is one fixed setting refused at or above 1/N (9), N drifts only within a factor of the first N (14),
the 'paper' norm-Laplace sampler is refused under DP (6), several API processes with DP are refused (11)."""

from __future__ import annotations

import pydantic
import pytest
from typer.testing import CliRunner

from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent
from server.core.errors import InvalidInput
from server.core.privacy import PrivacyLedger, PrivacyPolicy, Refusal
from server.core.types import Rejection, TaskGrant
from server.settings import Settings, with_overrides
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
    core = dp_core(store, PrivacyPolicy(delta=1e-3, epsilon_budget=None))
    device, _ = core.enroll("Pixel")
    grant = ask(core, device, 500)  # δ·N = 0.5
    assert isinstance(grant, TaskGrant) and grant.dp["delta"] == 1e-3
    other, _ = core.enroll("Pixel")
    refused = ask(core, other, 1000)  # δ = 1/N: one example in N may leak
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
    n, granted = 1000, []
    for _ in range(8):
        try:
            assert isinstance(ask(core, device, n), TaskGrant)
        except InvalidInput as refused:
            assert "first reported" in str(refused)
            break
        granted.append(n)
        n = 2 * n + 16
    assert granted == [1000], granted  # 2016 is more than 2x the first N
    for slow in (1900, 1999):  # small steps within 2x of the first N are fine ...
        assert isinstance(ask(core, device, slow), TaskGrant)
    with pytest.raises(InvalidInput):  # ... but the total drift is bounded, not each step
        ask(core, device, 2001)
    core.close()
    restarted = dp_core(store, core.privacy_policy)  # the anchor is the first charge's N, from storage
    with pytest.raises(InvalidInput, match="away from 1000"):
        ask(restarted, device, 2001)
    assert isinstance(ask(restarted, device, 501), TaskGrant)
    with pytest.raises(InvalidInput):
        ask(restarted, device, 499)


# -- finding 6: the 'paper' norm-Laplace sampler charged as ε-DP -------------------------------------------
@pytest.mark.parametrize("strategy", ["audp", "mapa"])
def test_the_paper_sampler_is_a_settings_error_with_dp_on_only(strategy):
    with pytest.raises(pydantic.ValidationError, match="'paper' noise sampler"):
        Settings(_env_file=None, dp=True, strategy=strategy, dp_noise_sampler="paper")
    assert Settings(_env_file=None, dp=False, strategy=strategy, dp_noise_sampler="paper").dp is False
    assert Settings(_env_file=None, dp=True, strategy=strategy, dp_noise_sampler="exact").dp
    running = Settings(_env_file=None, dp=True, strategy=strategy)
    with pytest.raises(pydantic.ValidationError, match="paper"):  # nor may the console switch to it
        with_overrides(running, {"strategy": f'{{"name": "{strategy}", "dp_noise_sampler": "paper"}}'})


def test_the_ledger_grants_no_paper_sampler_step_whatever_built_the_core():
    core = strategy_core(
        MemoryStore(), PrivacyPolicy(), "mapa", mapa_sensitivity=10.0, dp_noise_sampler="paper"
    )
    device, _ = core.enroll("Pixel")
    answer = ask(core, device, 200)
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
