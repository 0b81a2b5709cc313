"""Issue 27's push and durability findings, one regression test each (every one failed on the code before
it): a charge is durable before its grant is answered (8), a second, different body for a DP task is
refused (8b), a DP push far below what its noise alone gives is refused (15), and the bounds behind it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fleet_protocol.accounting import LOCAL_SGD, NORM_LAPLACE
from server.core.dp_bounds import gradient_bound, noise_floor, poisson_ceiling
from server.core.errors import Conflict, InvalidInput, StorageUnavailable
from server.core.privacy import PrivacyPolicy
from server.core.types import TaskGrant
from tests.memory_store import MemoryStore
from tests.test_privacy_ledger import ask, dp_core, push

TAIL = 1e-12
N = 5632  # bucket_examples(6000): what a DP device holding 6,000 examples reports


def honest(core, grant: TaskGrant, policy: PrivacyPolicy, seed: int = 0) -> np.ndarray:
    """What an honest device pushes: B clipped examples plus N(0, σ²C²) noise, over B."""
    n, rng = core.run.manifest.num_params, np.random.default_rng(seed)
    examples = rng.normal(size=(grant.batch_size, n))
    examples *= policy.clip / np.maximum(policy.clip, np.linalg.norm(examples, axis=1, keepdims=True))
    noise = rng.normal(0, policy.noise_multiplier * policy.clip, n)
    return ((examples.sum(0) + noise) / grant.batch_size).astype(np.float32)


# -- finding 8: the grant was answered before its charge was durable --------------------------------------
def test_a_dp_grant_whose_charge_does_not_commit_is_never_answered():
    store = MemoryStore()
    core = dp_core(store, PrivacyPolicy())
    device, _ = core.enroll("Pixel")
    core.journal.flush()
    store.fail_next = True
    with pytest.raises(StorageUnavailable, match="disk full"):
        ask(core, device)
    assert store.privacy_charges() == []  # nothing durable, and memory was reloaded from storage:
    assert core.privacy.device_view(device.device_id)["tasks"] == 0
    assert core.degraded is None
    grant = ask(core, device)
    assert isinstance(grant, TaskGrant)
    assert [c.task_id for c in store.privacy_charges()] == [grant.task_id]  # durable when answered
    core.close()


# -- finding 8b: a different body for a task whose first push was refused was accepted ---------------------
def test_after_a_refused_dp_push_only_the_same_body_may_come_again():
    policy = PrivacyPolicy(clip=1.0, noise_multiplier=1.0)
    store = MemoryStore()
    core = dp_core(store, policy)
    device, _ = core.enroll("Pixel")
    grant = ask(core, device)
    n = core.run.manifest.num_params
    unclipped = np.full(n, 10.0, np.float32)
    with pytest.raises(InvalidInput, match="exceeds the bound"):
        push(core, device, grant, unclipped, grant.batch_size)
    with pytest.raises(InvalidInput, match="exceeds the bound"):  # the same body: the same answer
        push(core, device, grant, unclipped, grant.batch_size)
    with pytest.raises(Conflict, match="refused"):  # another body: a second release for one charge
        push_as(core, device, grant, honest(core, grant, policy), "another body")
    core.close()
    restarted = dp_core(store, policy)  # the refused digest is stored with the open task
    with pytest.raises(Conflict, match="refused"):
        push_as(restarted, device, grant, honest(restarted, grant, policy), "yet another body")
    accepted = ask(restarted, device)  # an accepted push's task keeps its body too (as before)
    assert push_as(restarted, device, accepted, honest(restarted, accepted, policy), "first").applied
    with pytest.raises(Conflict, match="different body"):
        push_as(restarted, device, accepted, honest(restarted, accepted, policy, seed=1), "second")
    restarted.close()


def push_as(core, device, grant: TaskGrant, gradient: np.ndarray, digest: str):
    from server.core.types import TaskResult

    result = TaskResult(None, None, 10.0, None, grant.batch_size, gradient, digest)  # a DP push's meta
    return core.submit(device, grant.task_id, result)


# -- finding 15: an all-zero gradient was applied although the noise alone has a norm of about 0.119 --------
@pytest.mark.parametrize("batch", [50, 1000])
def test_an_unnoised_push_on_the_cnn_is_refused_and_an_honest_one_applied(batch):
    policy = PrivacyPolicy(clip=1.0, noise_multiplier=1.1, epsilon_budget=None)
    store = MemoryStore()
    core = dp_core(store, policy, model="mnist_cnn", batch=batch)
    device, _ = core.enroll("Pixel")
    n = core.run.manifest.num_params
    zero = ask(core, device, N)
    with pytest.raises(InvalidInput, match="least the DP noise alone gives"):
        push(core, device, zero, np.zeros(n, np.float32), batch)
    clipped_mean = ask(core, device, N)  # no noise: B clipped examples pointing anywhere, over B
    examples = np.random.default_rng(1).normal(size=(batch, n)).astype(np.float32)
    examples /= np.linalg.norm(examples, axis=1, keepdims=True)
    with pytest.raises(InvalidInput, match="not noised"):
        push(core, device, clipped_mean, examples.mean(0), batch)
    fine = ask(core, device, N)
    assert push(core, device, fine, honest(core, fine, policy), batch).applied
    recalled = ask(core, device, N)
    core.close()
    restarted = dp_core(store, policy, model="mnist_cnn", batch=batch)  # the floor is stored with the charge
    with pytest.raises(InvalidInput, match="least the DP noise alone gives"):
        push(restarted, device, recalled, np.zeros(n, np.float32), batch)
    restarted.close()


def test_the_gaussian_floor_holds_for_the_worst_clipped_sum_an_honest_device_can_send():
    """The clipped sum S is drawn before and apart from the noise N, so the worst S can do is point its
    whole norm against N's direction in expectation: S = −‖S‖·e for a fixed e, ‖S‖ up to B·C."""
    d, sigma, c, b = 11_786, 1.1, 1.0, 1000
    floor = noise_floor(c, sigma, b, d, None)
    rng = np.random.default_rng(7)
    e = np.zeros(d)
    e[0] = 1.0
    for size in (0.0, sigma * c * 7.0, 10.0, float(b) * c):  # sizes around the worst, z·σC
        norms = [np.linalg.norm(size * -e + rng.normal(0, sigma * c, d)) / b for _ in range(300)]
        assert min(norms) >= floor
    chi_low = math.sqrt(stats.chi2(d).ppf(TAIL))
    z = stats.norm.isf(TAIL)
    assert floor == pytest.approx(sigma * c * math.sqrt(chi_low**2 - z**2) / b)
    assert 0.9 * sigma * c * math.sqrt(d) / b < floor < sigma * c * math.sqrt(d) / b  # ~0.119 for d, B here


def test_the_local_sgd_and_norm_laplace_floors_and_the_round_bound_with_noise_at_every_step():
    d, sigma, c, s = 11_786, 1.1, 1.0, 20
    round_terms = {"mechanism": LOCAL_SGD, "clip": c, "noise_multiplier": sigma}
    chi_low = math.sqrt(stats.chi2(d).ppf(TAIL))
    assert noise_floor(c, 9.9, s, d, round_terms) == pytest.approx(  # s noise draws, one a step
        math.sqrt(s) * sigma * c * chi_low - c * poisson_ceiling(s)
    )
    weak = {**round_terms, "noise_multiplier": 0.05}  # the sum of clipped gradients can outweigh the noise
    assert noise_floor(c, sigma, s, d, weak) is None
    rng = np.random.default_rng(2)  # van Dijk's round noised at every step: U = Σ g + Σ_h n_h, s noises
    for aligned in (True, False):  # the clipped sum pointing one way (its largest norm), or anywhere
        g = np.full(d, c / math.sqrt(d)) if aligned else rng.normal(0, c / math.sqrt(d), d)
        u = g * poisson_ceiling(s) + rng.normal(0, sigma * c, (s, d)).sum(0)
        bound, floor = gradient_bound(c, 9.9, s, d, round_terms), noise_floor(c, 9.9, s, d, round_terms)
        assert floor <= np.linalg.norm(u) <= bound
    laplace = {
        "mechanism": NORM_LAPLACE,
        "clip": 3.0,
        "sensitivity": 0.5,
        "epsilon_step": 0.1,
        "noise": "exact",
    }
    low = stats.gamma(d, scale=0.5 / 0.1).ppf(TAIL)
    assert noise_floor(1.0, 1.0, 12, d, laplace) == pytest.approx(low - 3.0)
    assert noise_floor(1.0, 1.0, 12, d, {**laplace, "noise": "paper"}) is None  # refused under DP anyway


def test_the_floor_round_trips_through_sql_after_migration_0008(tmp_path):
    from server.compose import build_store
    from server.settings import Settings

    settings = Settings(data_dir=tmp_path, _env_file=None)
    core = dp_core(build_store(settings), PrivacyPolicy(), model="mnist_cnn")
    device, _ = core.enroll("Pixel")
    grant = ask(core, device, N)
    floor = core.leases.get(grant.task_id).dp_floor
    core.close()
    charges = build_store(settings).privacy_charges()
    assert floor > 0 and charges[0].norm_floor == pytest.approx(floor) and charges[0].norm_bound > floor
