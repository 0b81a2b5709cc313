"""Pure ε steps in the privacy ledger (issue 16): AUDP/MAPA's terms replace the Gaussian policy's, each step
is charged its ε by basic composition (on top of any Gaussian PLD ε), the budget stops the device, the
charges survive a restart (memory and SQL, migration 0004), and a push's norm bound is the noise's 1e-12
tail."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fleet_protocol.accounting import DEFAULT_DELTA, NORM_LAPLACE, PrivacyEvent, norm_laplace_bound
from server.core.coordinator import Coordinator
from server.core.errors import InvalidInput
from server.core.events import PrivacyCharged
from server.core.privacy import PrivacyLedger, PrivacyPolicy
from server.core.types import Rejection, TaskGrant
from server.strategies import make_strategy
from sim.harness import BatchSizer
from tests.memory_store import MemoryStore
from tests.test_privacy_ledger import ask, dp_core, push, reference_epsilon


def strategy_core(store, policy: PrivacyPolicy, name: str = "mapa", **params) -> Coordinator:
    dp_core(store, policy).close()  # adds the model once; rebuilt below with the strategy under test
    core = Coordinator(
        store=store,
        profiler=BatchSizer(mean=50),
        strategy_factory=lambda: make_strategy(name, **params),
        privacy=policy,
    )
    core.start()
    return core


def test_strategy_terms_replace_the_gaussian_and_pure_epsilon_adds_up_to_the_budget():
    store = MemoryStore()
    core = strategy_core(store, PrivacyPolicy(epsilon_budget=1.0), "audp", dp_step_epsilon=0.3, audp_clip=3.0)
    device, _ = core.enroll("Pixel")
    grants = []
    while len(grants) < 10:
        answer = ask(core, device, 192)
        if isinstance(answer, Rejection):
            break
        grants.append(answer)
    assert len(grants) == 3 and answer.reason == "privacy_budget_exhausted"  # 0.9 + 0.3 > 1
    dp = grants[0].dp
    assert dp["mechanism"] == NORM_LAPLACE and dp["clip"] == 3.0 and dp["sensitivity"] == pytest.approx(0.5)
    assert grants[0].batch_size == dp["expected_batch"] == 12 and dp["sampling_rate"] == 12 / 192
    assert [g.dp["epsilon_after"] for g in grants] == pytest.approx([0.3, 0.6, 0.9])
    view = core.privacy.device_view(device.device_id)
    assert view["epsilon"] == pytest.approx(0.9) and view["epsilon_pure"] == pytest.approx(0.9)
    assert view["tasks"] == 3 and view["exhausted"]
    core.journal.flush()
    charges = store.privacy_charges()
    assert [(c.mechanism, c.epsilon) for c in charges] == [(NORM_LAPLACE, 0.3)] * 3
    restarted = strategy_core(store, core.privacy_policy, "audp", dp_step_epsilon=0.3)
    assert restarted.privacy.device_view(device.device_id)["epsilon"] == pytest.approx(0.9)
    assert ask(restarted, device, 192).reason == "privacy_budget_exhausted"


def test_a_device_with_both_kinds_spends_gaussian_pld_plus_pure_sum():
    policy = PrivacyPolicy(clip=1.0, noise_multiplier=2.0, epsilon_budget=None)
    gaussian = [PrivacyCharged("d", f"g{i}", "m", 0.0, 2.0, 0.25, 200) for i in range(5)]
    pure = [
        PrivacyCharged("d", f"p{i}", "m", 1.0, 1.0, 0.06, 200, mechanism=NORM_LAPLACE, epsilon=0.1)
        for i in range(4)
    ]
    ledger = PrivacyLedger(policy, [*gaussian, *pure])
    delta = DEFAULT_DELTA
    expected = reference_epsilon([PrivacyEvent(2.0, 0.25, 5)], delta) + 0.4
    view = ledger.device_view("d")
    assert view["epsilon"] == pytest.approx(expected, rel=1e-6) and view["tasks"] == 9
    assert ledger.overview()["pure_mechanism"] == NORM_LAPLACE
    terms = ledger.terms("d", 200, 50)  # the next Gaussian step's projection counts the pure ε too
    after = reference_epsilon([PrivacyEvent(2.0, 0.25, 6)], delta) + 0.4
    assert terms["epsilon_after"] == pytest.approx(after, rel=1e-6)


def test_the_norm_bound_of_a_pure_step_is_the_noise_tail_and_replaces_max_gradient_norm():
    store = MemoryStore()
    core = strategy_core(store, PrivacyPolicy(), "mapa", mapa_sensitivity=10.0)
    core.max_gradient_norm = 1.0  # far below what the noise legitimately reaches
    device, _ = core.enroll("Pixel")
    n = core.run.manifest.num_params
    grant = ask(core, device, 192)
    assert isinstance(grant, TaskGrant) and grant.dp["sensitivity"] == 10.0 and grant.dp["noise"] == "exact"
    scale = 10.0 / 0.1
    bound = norm_laplace_bound(60.0, scale, n, "exact")
    assert bound == pytest.approx(60.0 + stats.gamma(n, scale=scale).isf(1e-12)) and bound > n * scale
    honest = np.full(n, 0.9999 * bound / np.sqrt(n), np.float32)
    assert push(core, device, grant, honest, 12).applied
    beyond = ask(core, device, 192)
    with pytest.raises(InvalidInput, match="exceeds the bound"):
        push(core, device, beyond, np.full(n, 1.0001 * bound / np.sqrt(n), np.float32), 12)
    paper = norm_laplace_bound(60.0, scale, n, "paper")  # the paper's sampler (DP off only)
    assert paper == pytest.approx(60.0 + stats.expon(scale=scale).isf(1e-12))


def test_pure_charges_round_trip_through_sql_after_migration_0004(tmp_path):
    from server.compose import build_store
    from server.settings import Settings

    settings = Settings(data_dir=tmp_path, _env_file=None)
    store = build_store(settings)
    core = strategy_core(store, PrivacyPolicy(), "mapa", mapa_sensitivity=10.0)
    device, _ = core.enroll("Pixel")
    grant = ask(core, device, 192)
    core.close()
    charges = build_store(settings).privacy_charges()
    assert len(charges) == 1 and charges[0].mechanism == NORM_LAPLACE and charges[0].epsilon == 0.1
    assert charges[0].task_id == grant.task_id and charges[0].norm_bound > 10.0 / 0.1 * 7850
