"""The simulator's adversary hook (sim/adversary.py, issue 30): a clean run is the run it always was,
attackers change it, Sybils share one key, and the backdoor's success rate is measured on the evaluator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from client._attacks import Backdoor, add_trigger, make_attack, trigger_size
from models.manifest import builtin
from server.strategies import make_strategy
from sim.adversary import SYBIL_KEY, Adversary, adversary, backdoor_success
from sim.controlled import Workbench
from sim.data import load_mnist, partition_sorted_shards
from sim.fleet import FleetResult, FleetSimulator

# what sim/fleet.py gave for this run before the hook existed (accuracy is k/1000: exact)
BEFORE = {
    False: [0.059, 0.336, 0.555, 0.613, 0.313, 0.692, 0.74, 0.711, 0.712],
    True: [0.059, 0.37, 0.607, 0.673, 0.441, 0.711, 0.769, 0.791, 0.82],
}
STALENESS_SUM = {False: 207, True: 217}


@pytest.fixture(scope="module")
def bench() -> Workbench:
    train, test = load_mnist(seed=0)
    return Workbench(builtin("logreg"), train, test)


def simulate(
    bench: Workbench, adv: Adversary | None = None, *, draw: bool = False
) -> tuple[FleetResult, Any]:
    """10 devices of 2 label shards each, FedBuff (undefended), logistic regression, 400 gradients."""
    parts = partition_sorted_shards(bench.train.y, 10, np.random.default_rng(0))
    joined = iter(range(10**6))
    sim = FleetSimulator(
        bench, lambda: make_strategy("fedbuff", learning_rate=0.5), devices=10,
        shard_for=lambda rng: parts[next(joined) % 10], seed=3, batch=32, eval_every_gradients=50,
        draw_at_grant=draw, adversary=adv,
    )  # fmt: skip
    return sim.run(max_gradients=400), sim


@pytest.mark.parametrize("draw", [False, True])
def test_without_attackers_the_run_is_the_one_before_the_hook(bench, draw):
    result, _ = simulate(bench, draw=draw)
    assert result.accuracy == BEFORE[draw] and sum(result.staleness) == STALENESS_SUM[draw]
    nobody = Adversary(make_attack("gaussian", np.random.default_rng(0)), attackers=())
    again, sim = simulate(bench, nobody, draw=draw)
    assert again.accuracy == BEFORE[draw] and again.staleness == result.staleness
    assert nobody.counts() == {"byzantine": 0, "byzantine_dropped": 0, "honest": 400, "honest_dropped": 0}
    assert sim.devices_per_key() == {f"key-{i}": 1 for i in range(10)}


def test_alie_and_ipm_degrade_an_undefended_fedbuff_run(bench):
    def late(result: FleetResult) -> float:
        return float(np.mean(result.accuracy[-3:]))

    clean = late(simulate(bench)[0])
    for name, params in (("alie", {}), ("ipm", {"epsilon": 0.1}), ("ipm", {"epsilon": 10.0})):
        adv = adversary(name, devices=10, attackers=3, seed=3, **params)
        result, _ = simulate(bench, adv)
        assert adv.counts()["byzantine"] > 80 and adv.counts()["honest"] + adv.counts()["byzantine"] == 400
        assert late(result) < clean - 0.05, (name, params, late(result), clean)
        if name == "alie":
            assert adv.attack.n == 10 and adv.attack.f == 3  # type: ignore[attr-defined]  # the fleet's n, f


def test_silent_attackers_push_nothing_the_strategy_sees_and_keep_their_share_of_the_budget(bench):
    """The bound beside the defences: what the honest devices reach when every attacker push is lost."""
    silent = adversary("silent", devices=10, attackers=3, seed=3)
    result, sim = simulate(bench, silent)
    counts = silent.counts()
    assert counts["byzantine"] == counts["byzantine_dropped"] > 80  # each taken task, lost on the way
    assert counts["honest"] + counts["byzantine"] == 400 and counts["honest_dropped"] == 0
    assert result.dropped == counts["byzantine"] and not sim._handed
    assert sim.core.run.strategy.describe()["updates"] == counts["honest"] // 10  # K = 10: honest only
    assert max(result.accuracy) > 0.5  # the honest seven still learn


def test_sybils_in_the_simulator_share_one_enrollment_key(bench):
    adv = adversary("sybil", devices=10, attackers=3, seed=3, inner="sign-flip")
    result, sim = simulate(bench, adv)
    keys = sim.devices_per_key()
    assert keys[SYBIL_KEY] == 3 and len(keys) == 8 and all(keys[f"key-{i}"] == 1 for i in range(3, 10))
    assert [vd.key for vd in sim.devices[:3]] == [SYBIL_KEY] * 3
    assert result.accuracy[-1] < 0.2  # three −10·g Sybils undo an undefended mean


def test_attack_success_rate_on_the_evaluator_of_models_that_ignore_or_obey_the_trigger(bench):
    target = 0
    manifest = bench.bundle.manifest
    params = simulate(bench)[1].core.run.params.copy()
    weights = params[: 10 * 784].reshape(10, 784)  # logreg: fc.weight (10, 784), then fc.bias (10,)
    patch = np.zeros((28, 28), bool)
    patch[-trigger_size(28) :, -trigger_size(28) :] = True
    weights[:, patch.ravel()] = 0.0  # the patch's pixels feed nothing: the model ignores the trigger
    evaluator = bench.evaluator
    others = evaluator.y != target
    clean_rate = float(
        (evaluator.logits(params, evaluator.x[others]).argmax(axis=1) == target).mean()
    )  # its plain rate of calling a non-target image the target
    assert backdoor_success(bench, params, Backdoor(target=target)) == pytest.approx(clean_rate)
    assert clean_rate < 0.2
    always = np.zeros(manifest.num_params, np.float32)
    always[-10 + target] = 1.0  # b favours the target, W = 0
    assert backdoor_success(bench, always, Backdoor(target=target)) == 1.0
    assert add_trigger(evaluator.x[:1]).shape == evaluator.x[:1].shape


@pytest.mark.parametrize("draw", [False, True])
def test_a_backdoor_fleet_learns_the_trigger_and_the_clean_one_does_not(bench, draw):
    clean_params = simulate(bench, draw=draw)[1].core.run.params
    adv = adversary("backdoor", devices=10, attackers=3, seed=3, target=0, boost=3.0)
    result, sim = simulate(bench, adv, draw=draw)
    attacked = backdoor_success(bench, sim.core.run.params, adv.attack)  # type: ignore[arg-type]
    clean = backdoor_success(bench, clean_params, adv.attack)  # type: ignore[arg-type]
    assert clean < 0.2 and attacked > 0.8, (clean, attacked)
    assert result.accuracy[-1] > 0.5  # the main task still learns: the backdoor hides


def test_a_push_past_the_norm_bound_is_refused_not_fatal_and_counted_against_its_sender(bench):
    """A real device's push beyond max_gradient_norm gets a 422: in the simulator an attacker's is dropped
    and the run goes on; an honest one that large means the model blew up, and the run ends diverged."""
    huge = adversary("scaled", devices=10, attackers=3, seed=3, k=1e15)  # −1e15·g: past the 1e12 bound
    result, _ = simulate(bench, huge)
    counts = huge.counts()
    assert counts["byzantine"] > 80 and counts["byzantine_dropped"] == counts["byzantine"]
    assert not result.diverged and result.dropped >= counts["byzantine"]
    assert result.accuracy[-1] > 0.5  # the bound kept the attack out entirely


def test_a_backdoor_with_an_honest_head_pushes_the_clean_batchs_output_layer_and_labels():
    """The attack that adapts to label-check: the trigger learnt through the hidden layers only (the MLP:
    logistic regression is all output layer)."""
    bench = Workbench(builtin("mlp"), *load_mnist(seed=0))
    rows = np.arange(40)
    params = bench.bundle.init_params
    loss, clean = bench.gradients.loss_and_gradient(params, bench.train.x[rows], bench.train.y[rows])
    weight, bias = bench.bundle.manifest.head()
    plain = adversary("backdoor", devices=10, attackers=3, seed=1, target=0, share=0.5)
    adaptive = adversary("backdoor", devices=10, attackers=3, seed=1, target=0, share=0.5, honest_head=True)
    _, poisoned, poisoned_y = plain.push(bench, params, rows, loss, clean)
    _, pushed, claimed = adaptive.push(bench, params, rows, loss, clean)
    np.testing.assert_array_equal(pushed[weight], clean[weight])
    np.testing.assert_array_equal(pushed[bias], clean[bias])
    np.testing.assert_array_equal(claimed, bench.train.y[rows])  # the clean labels, not the target
    assert (poisoned_y == 0).sum() > (bench.train.y[rows] == 0).sum()  # the plain one relabelled some
    assert not np.allclose(pushed, clean)  # the rest is the poisoned batch's
    np.testing.assert_array_equal(pushed[: weight.start], poisoned[: weight.start])
