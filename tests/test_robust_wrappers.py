"""Issue 30, the defences as wrappers: each statistic's definition on small hand-made arrays, their
composition with fedbuff-equal (K = 5) and dynsgd (K = 1), their state across a restart, the settings'
refusals, and a short simulated fleet where 3 of 10 devices send −10·g."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from server.settings import Settings
from server.strategies import (
    Arrival,
    CenteredClip,
    NormNoise,
    RobustAggregation,
    TrustedScore,
    make_strategy,
)
from server.strategies.centered_clip import centered_clip
from server.strategies.direction import contributions
from server.strategies.robust_aggregation import coordinate_median, geometric_median, trimmed_mean
from server.strategies.trusted_score import TrustedScoreSettings, aflguard_distance, zeno_score


def arrival(gradient, task: str = "t", tau: int = 0, device: str = "d", version: int = 0) -> Arrival:
    g = np.asarray(gradient, np.float32)
    return Arrival(task, device, version - tau, tau, g, np.array([1, 1]), 2, 1.0, 0.0)


class FixedReference:
    """A ``ReferenceGradient`` port that returns a fixed g_s and counts its calls."""

    def __init__(self, gradient) -> None:
        self.value, self.calls = np.asarray(gradient, np.float32), 0

    def gradient(self) -> np.ndarray:
        self.calls += 1
        return self.value


# -- the statistics, by definition -----------------------------------------------------------------
def test_trimmed_mean_drops_the_extremes_of_each_coordinate():
    rows = np.array([[1.0, -50.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [100.0, 5.0]])
    value, influence = trimmed_mean(rows, 0.2)
    np.testing.assert_allclose(value, [3.0, 3.0])  # 1 and 100 dropped, -50 and 5 dropped
    np.testing.assert_allclose(influence, [0, 5 / 3, 5 / 3, 5 / 3, 0])  # rows 0 and 4: trimmed everywhere
    np.testing.assert_allclose(trimmed_mean(rows, 0.0)[0], rows.mean(axis=0))


@pytest.mark.parametrize("robust", [coordinate_median, geometric_median])
def test_median_and_geometric_median_resist_fewer_than_half_arbitrary_vectors(robust):
    rng = np.random.default_rng(0)
    honest = rng.normal(1.0, 0.1, (6, 8))
    for attack in (1e6, -1e6):
        rows = np.vstack([honest, np.full((5, 8), attack)])  # f = 5 < n/2 = 5.5
        value, influence = robust(rows)
        assert np.abs(value - 1.0).max() < 0.5, value
        assert (influence[6:] < 0.5).all()
    value, _ = robust(np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]]))
    assert np.isfinite(value).all()


def test_geometric_median_is_the_point_of_least_total_distance():
    rows = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [10.0, 10.0]])
    value, _ = geometric_median(rows, iterations=200, smoothing=1e-9)

    def total(z):
        return np.linalg.norm(rows - z, axis=1).sum()

    for step in ([1e-3, 0], [0, 1e-3], [-1e-3, 0], [0, -1e-3]):
        assert total(value) <= total(value + np.array(step)) + 1e-9


def test_centered_clipping_moves_at_most_tau_per_outlier():
    center, tau = np.zeros(3), 0.5
    outlier = np.array([[1e6, -1e6, 1e6]])
    v, clipped = centered_clip(outlier, center, tau)
    assert np.linalg.norm(v - center) == pytest.approx(tau) and clipped.all()
    rows = np.vstack([np.full((4, 3), 0.1), np.full((1, 3), -1e6)])
    v, clipped = centered_clip(rows, center, tau)
    assert np.linalg.norm(v - np.full(3, 0.1) * 4 / 5) <= tau / 5 + 1e-9  # the outlier's pull: ≤ τ/n
    assert clipped.tolist() == [False] * 4 + [True]


def test_the_trusted_tests_accept_an_agreeing_gradient_and_refuse_a_flipped_one():
    g_s = np.array([1.0, 1.0])
    assert aflguard_distance(np.array([1.2, 0.9]), g_s) < 1 < aflguard_distance(-10 * g_s, g_s)
    assert zeno_score(np.array([5.0, 4.0]), g_s, 0.1, 0.001) > 0 > zeno_score(-10 * g_s, g_s, 0.1, 0.001)


# -- composed with fedbuff-equal (K = 5) and dynsgd (K = 1) ------------------------------------------
def test_contributions_average_to_the_strategys_own_direction():
    from server.strategies import STRATEGIES
    from server.strategies.direction import OWN_AGGREGATE

    for name in sorted(set(STRATEGIES) - set(OWN_AGGREGATE)):  # every combine has its coefficients
        strategy = make_strategy(name, k=3)
        for i, tau in enumerate((0, 2, 5)):
            strategy.receive(arrival(np.full(4, i + 1.0), f"t{i}", tau))
        if not strategy.buffer:  # ssgd buffers only the tasks of its round (granted through admit)
            continue
        np.testing.assert_allclose(
            contributions(strategy).mean(axis=0), strategy.combine(np.zeros(4, np.float32)), rtol=1e-5
        )


def _feed(strategy, gradients, params):
    """Push each gradient (version = updates so far) and step when ready; the final parameters."""
    for i, g in enumerate(gradients):
        strategy.receive(arrival(g, f"t{i}", 0, f"d{i % 10}", strategy.updates))
        if strategy.ready(0.0):
            params = strategy.aggregate(params)
    return params


@pytest.mark.parametrize("name", ["fedbuff-equal", "dynsgd"])
@pytest.mark.parametrize(
    "defence",
    [
        lambda s: CenteredClip(s),
        lambda s: RobustAggregation(s, statistic="trimmed-mean"),
        lambda s: RobustAggregation(s, statistic="median"),
        lambda s: RobustAggregation(s),
        lambda s: TrustedScore(s, reference=FixedReference(np.ones(4))),
        lambda s: NormNoise(s, bound=2.0, noise=0.01, rng=np.random.default_rng(0)),
    ],
    ids=["centered-clip", "trimmed-mean", "median", "geometric-median", "trusted-score", "norm-noise"],
)
def test_each_defence_composes_with_fedbuff_equal_and_dynsgd_and_resumes_after_a_restart(name, defence):
    rng = np.random.default_rng(1)
    gradients = [np.ones(4) + rng.normal(0, 0.1, 4) for _ in range(40)]
    for i in range(0, 40, 10):
        gradients[i] = -10 * np.ones(4)  # an attacker now and then
    strategy = defence(make_strategy(name))
    params = _feed(strategy, gradients, np.zeros(4, np.float32))
    assert strategy.updates > 0 and np.isfinite(params).all()
    assert (params < 0).all(), params  # it still descends along the honest gradient
    figures = strategy.describe()
    assert figures["strategy"] == name and figures["updates"] == strategy.updates

    state = strategy.state_dict()
    restarted = defence(make_strategy(name))
    restarted.load_state_dict(state)
    last = {"trusted_last_score", "noise_bound", "noise_std"}  # the last step's diagnostics, not state

    def kept(figures: dict) -> dict:
        return {key: value for key, value in figures.items() if key not in last}

    assert kept(restarted.describe()) == kept(figures)
    more = [np.ones(4)] * 10
    if isinstance(strategy, NormNoise):
        strategy.rng, restarted.rng = np.random.default_rng(2), np.random.default_rng(2)
    np.testing.assert_allclose(_feed(restarted, more, params), _feed(strategy, more, params), rtol=1e-5)


def test_robust_aggregation_holds_its_own_buffer_when_k_is_smaller():
    strategy = RobustAggregation(make_strategy("dynsgd"), statistic="median", least=3)
    params = np.zeros(2, np.float32)
    for i, g in enumerate(([1.0, 1.0], [1e6, -1e6], [1.0, 1.0])):
        strategy.receive(arrival(g, f"t{i}"))
        assert strategy.ready(0.0) == (i == 2)
    new = strategy.aggregate(params)
    np.testing.assert_allclose(new, -0.2 * 3 * np.ones(2), rtol=1e-6)  # γ × n × the median (a sum strategy)
    assert strategy.describe()["robust_downweighted"] == 1 and strategy.last_downweighted == ["t1"]


def test_trusted_score_drops_a_flipped_gradient_with_weight_zero_and_counts_it():
    port = FixedReference([1.0, 1.0])
    strategy = TrustedScore(make_strategy("fedbuff", k=2), reference=port, refresh=2)
    assert strategy.receive(arrival([1.1, 0.8], "a", version=0)) > 0
    assert strategy.receive(arrival([-10.0, -10.0], "b", version=0)) == 0.0
    assert len(strategy.buffer) == 1 and strategy.describe()["trusted_dropped"] == 1
    assert strategy.last_dropped == "b" and port.calls == 1  # one g_s per version (refresh 2: kept)
    strategy.receive(arrival([1.0, 1.0], "c", tau=1, version=2))
    assert port.calls == 2
    zeno = TrustedScore(make_strategy("dynsgd"), test="zeno++", reference=port)
    assert zeno.receive(arrival([-1.0, -3.0])) == 0.0 and zeno.receive(arrival([3.0, 1.0])) > 0
    with pytest.raises(RuntimeError, match="no reference gradient"):
        TrustedScore(make_strategy("dynsgd")).receive(arrival([1.0, 1.0]))


def test_norm_noise_adds_what_clip_norm_lacks():
    strategy = NormNoise(make_strategy("fedbuff", k=1), bound=1.0)
    strategy.receive(arrival([3.0, 4.0]))
    np.testing.assert_allclose(
        strategy.aggregate(np.zeros(2, np.float32)), [-0.2 * 0.6, -0.2 * 0.8], rtol=1e-6
    )
    assert strategy.describe()["noise_clipped"] == 1
    noisy = NormNoise(make_strategy("fedbuff-equal", k=1), noise=1.0, rng=np.random.default_rng(0))
    assert noisy.effective_bound() is None  # the preset's clip-norm has no median yet
    steps = [noisy.aggregate(np.zeros(2, np.float32)) for _ in range(8) if noisy.receive(arrival([1.0, 0]))]
    assert noisy.describe()["noise_bound"] == pytest.approx(2.0)  # 2 × the median norm, fedbuff-equal's
    assert np.std([s[1] for s in steps[6:]]) > 0  # noise on the coordinate no gradient moves


# -- settings ---------------------------------------------------------------------------------------
def test_the_settings_refuse_what_cannot_run_and_wire_the_trusted_port(tmp_path):
    def refused(**values) -> str:
        with pytest.raises(ValidationError) as caught:
            Settings(_env_file=None, **values)
        return str(caught.value)

    assert "requires its data" in refused(wrappers=["trusted-score"])
    test = tmp_path / "test.npz"
    np.savez(test, x=np.zeros((4, 1, 28, 28), np.uint8), y=np.zeros(4, np.int64))
    both = {"name": "trusted-score", "data": str(test)}
    assert "other than FLEET_EVAL_DATA" in refused(wrappers=[both], eval_data=test)
    assert "steps by its buffer's combination" in refused(strategy="wkafl", wrappers=["robust-aggregation"])
    assert "trims nothing" in refused(
        wrappers=[{"name": "robust-aggregation", "statistic": "trimmed-mean", "trim": 0.1}]
    )
    assert "requires a bound" in refused(strategy="dynsgd", wrappers=[{"name": "norm-noise", "noise": 0.1}])
    Settings(_env_file=None, strategy="dynsgd", wrappers=["clip-norm", {"name": "norm-noise", "noise": 0.1}])

    from server.compose import build_strategy, trusted_gradient

    settings = Settings(_env_file=None, strategy="dynsgd", wrappers=["centered-clip", both])
    port = trusted_gradient(settings)
    built = build_strategy(settings, port)
    assert (
        isinstance(built, TrustedScore) and built.reference is port and isinstance(built.inner, CenteredClip)
    )
    assert port is not None and port.x.dtype == np.float32 and port.x.max() <= 1.0


def test_the_console_form_offers_the_defences():
    from server.console.pages import input_kind
    from server.strategies import WRAPPERS

    for name in ("centered-clip", "robust-aggregation", "trusted-score", "norm-noise", "sign-vote"):
        fields = WRAPPERS[name].settings.model_fields
        assert all(field.description for key, field in fields.items() if key != "name")
    statistic = WRAPPERS["robust-aggregation"].settings.model_fields["statistic"]
    assert input_kind(statistic.annotation) == ["trimmed-mean", "median", "geometric-median"]


# -- a short simulated fleet: 3 of 10 devices send −10·g ----------------------------------------------
@pytest.fixture(scope="module")
def fleet_run():
    from client import GradientSession
    from models.manifest import builtin
    from server.compose import TrustedGradient
    from server.core.evaluation import Evaluator
    from server.strategies import wrap
    from sim.data import load_mnist, partition_iid
    from sim.scripted import ScriptedFleet

    bundle = builtin("logreg")
    train, test = load_mnist(seed=0)
    trusted = train.subset(np.arange(3900, 4000))  # held out of every device's data; not the test set
    parts = partition_iid(3900, 10, np.random.default_rng(0))
    session = GradientSession(bundle.manifest, bundle.train_onnx)
    evaluator = Evaluator(bundle.manifest, bundle.infer_onnx, test.x, test.y)
    counts = [np.bincount(train.y[p], minlength=10) for p in parts]

    def run(strategy: str, wrappers: list, attackers: int) -> tuple[float, dict]:
        port = TrustedGradient(trusted.x, trusted.y)
        fleet = ScriptedFleet(
            bundle,
            lambda: wrap(make_strategy(strategy), wrappers, reference=port),
            label_counts=counts,
            batch=32,
        )
        port.coordinator = fleet.core
        rng = np.random.default_rng(0)
        for i in range(10):
            fleet.ask(i)  # every device holds a task: up to 9 versions stale
        for _ in range(600):
            i = int(rng.integers(10))
            batch = rng.choice(parts[i], 32)
            loss, g = session.loss_and_gradient(fleet.devices[i].params, train.x[batch], train.y[batch])
            fleet.push(
                i,
                -10 * g if i < attackers else g,
                loss=loss,
                label_counts=np.bincount(train.y[batch], minlength=10),
            )
            fleet.ask(i)
        accuracy = evaluator.evaluate(fleet.params)[0] if np.isfinite(fleet.params).all() else 0.0
        return accuracy, fleet.strategy.describe()

    return run


@pytest.mark.slow  # ~30 s of simulation: the slow tier
def test_a_defended_fleet_stays_near_the_clean_one_where_the_undefended_one_fails(fleet_run):
    from server.strategies.centered_clip import CenteredClipSettings
    from server.strategies.robust_aggregation import RobustAggregationSettings

    trusted = TrustedScoreSettings(data="held-out")  # the port is given directly here
    for strategy, defences in (
        ("fedbuff-equal", [RobustAggregationSettings(), CenteredClipSettings(), trusted]),
        ("dynsgd", [CenteredClipSettings(), trusted]),
    ):
        clean, _ = fleet_run(strategy, [], 0)
        attacked, _ = fleet_run(strategy, [], 3)
        assert clean > 0.8 and attacked < clean - 0.3, (strategy, clean, attacked)
        for defence in defences:  # centered clipping at γ 0.3: 0.804 of 0.876
            defended, figures = fleet_run(strategy, [defence], 3)
            assert defended > clean - 0.1, (strategy, defence.name, clean, defended)
        # AFLGuard's test (λ = 3) drops no honest gradient of the clean fleet
        _, figures = fleet_run(strategy, [trusted], 0)
        assert figures["trusted_dropped"] == 0, figures


def test_the_console_adds_a_defence_and_renders_its_fields(tmp_path):
    from tests.test_console import csrf
    from tests.test_settings_combinations import _console

    client = _console(tmp_path)
    try:
        post = {"csrf_token": csrf(client), "wrappers.add": "robust-aggregation"}
        assert "saved" in client.post("/admin/settings", data=post).text
        assert type(client.app.state.coordinator.run.strategy) is RobustAggregation
        page = client.get("/admin/settings").text
        assert 'name="wrappers.0.statistic"' in page and 'name="wrappers.0.least"' in page
        refused = {"csrf_token": csrf(client), "wrappers.add": "trusted-score"}  # no trusted data: refused
        answer = client.post("/admin/settings", data=refused)
        assert answer.status_code == 422 and "Nothing was changed" in answer.text
    finally:
        client.__exit__(None, None, None)
