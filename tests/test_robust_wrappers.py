"""Issue 30, the defences as wrappers: each statistic's definition on small hand-made arrays, their
composition with fedbuff-equal (K = 5) and dynsgd (K = 1), their state across a restart, the settings'
refusals, and a short simulated fleet where 3 of 10 devices send −10·g."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from server.settings import Settings
from server.store.codec import decode_state, encode_state
from server.strategies import (
    Arrival,
    CenteredClip,
    FedBuff,
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
    from server.strategies.trusted_score import TrustedScoreSettings

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


class _Recorder(FedBuff):  # FedBuff that keeps what reached it
    def __init__(self) -> None:
        super().__init__(learning_rate=0.1, k=100)
        self.seen: list[Arrival] = []

    def receive(self, arrival: Arrival) -> float:
        self.seen.append(arrival)
        return super().receive(arrival)


def test_fltrust_weighs_by_agreement_at_the_reference_norm_and_drops_what_points_away():
    inner = _Recorder()
    strategy = TrustedScore(inner, test="fltrust", reference=FixedReference([3.0, 4.0]))  # ‖g_s‖ = 5
    assert strategy.receive(arrival([30.0, 40.0], "a")) > 0  # agrees fully, ten times too long
    assert np.linalg.norm(inner.seen[-1].gradient) == pytest.approx(5.0)  # at g_s's norm, score 1 / mean 1
    assert strategy.receive(arrival([-3.0, -4.0], "b")) == 0.0  # cos −1: weight 0, counted
    assert strategy.describe()["trusted_dropped"] == 1 and strategy.last_dropped == "b"
    strategy.receive(arrival([4.0, 3.0], "c"))  # cos 0.96, above the recent mean score (0.65): up to 2x
    assert 5.0 < np.linalg.norm(inner.seen[-1].gradient) <= 10.0 + 1e-5


def test_fltrust_at_the_fleet_scale_and_with_a_device_memory():
    inner = _Recorder()
    strategy = TrustedScore(inner, test="fltrust", scale="fleet", device_memory=9,
                            reference=FixedReference([1.0, 0.0]))  # fmt: skip
    for i in range(5):  # an honest device, agreeing, norm 2
        strategy.receive(arrival([2.0, 0.2], f"h{i}", device="honest"))
    assert np.linalg.norm(inner.seen[-1].gradient) == pytest.approx(2.0, rel=0.05)  # the fleet's own norm
    assert strategy.receive(arrival([-0.1, 2.0], "h-noisy", device="honest")) > 0  # cos < 0, but its record
    for i in range(3):  # a device that always points away: its standing stays below 0
        assert strategy.receive(arrival([-2.0, 0.0], f"b{i}", device="flipper")) == 0.0


def test_fltrust_fleet_down_never_lengthens_a_short_gradient():
    inner = _Recorder()
    strategy = TrustedScore(inner, test="fltrust", scale="fleet-down", reference=FixedReference([1.0, 0.0]))
    for i in range(5):  # the fleet's norm: 2
        strategy.receive(arrival([2.0, 0.0], f"h{i}"))
    strategy.receive(arrival([20.0, 0.0], "long"))  # brought down to the fleet's median norm
    assert np.linalg.norm(inner.seen[-1].gradient) == pytest.approx(2.0, rel=0.05)
    strategy.receive(arrival([0.2, 0.0], "short"))  # IPM-sized: kept at its own length, not scaled 10x
    assert np.linalg.norm(inner.seen[-1].gradient) <= 0.2 * 2.0 + 1e-6  # at most the score's 2x
    fleet = TrustedScore(_Recorder(), test="fltrust", scale="fleet", reference=FixedReference([1.0, 0.0]))
    for i in range(5):
        fleet.receive(arrival([2.0, 0.0], f"h{i}"))
    fleet.receive(arrival([0.2, 0.0], "short"))
    assert np.linalg.norm(fleet.inner.seen[-1].gradient) > 1.0  # what fleet-down prevents


def test_fltrust_floor_scores_a_low_standing_zero_and_keeps_its_norm_out_of_the_fleets():
    floor = TrustedScore(_Recorder(), test="fltrust", scale="fleet-down", floor=0.5,
                         reference=FixedReference([1.0, 0.0]))  # fmt: skip
    reference = FixedReference([1.0, 0.0])
    plain = TrustedScore(_Recorder(), test="fltrust", scale="fleet-down", reference=reference)
    for strategy in (floor, plain):
        for i in range(5):  # honest: cos 0.98, norm 2
            strategy.receive(arrival([2.0, 0.4], f"h{i}"))
        for i in range(4):  # IPM-like: short, agreeing a little (cos 0.2 < half the median 0.98)
            strategy.receive(arrival([0.02, 0.098], f"s{i}"))
    assert plain.dropped == 0 and floor.dropped == 4 and floor.last_dropped == "s3"
    assert min(plain.norms) < 0.2 < 1.9 < min(floor.norms)  # the short norms join the fleet's, or not
    assert floor.receive(arrival([2.0, 0.4], "h")) > 0  # an honest push still passes
    assert TrustedScoreSettings(floor=0.5).floor == 0.5
    with pytest.raises(ValueError):
        TrustedScoreSettings(floor=1.5)


class LabelledReference(FixedReference):
    """g_s per label: label 0 points along x, label 1 along y; the whole g_s is their sum."""

    def gradient(self, label=None) -> np.ndarray | None:
        self.calls += 1
        return {None: np.float32([1, 1]), 0: np.float32([1, 0]), 1: np.float32([0, 1])}.get(label)


def _labelled(gradient, counts, task: str) -> Arrival:
    g = np.asarray(gradient, np.float32)
    return Arrival(task, "d", 0, 0, g, np.asarray(counts), 2, 1.0, 0.0)


def test_fltrust_by_labels_scores_a_device_against_the_labels_it_trained_on():
    reference = LabelledReference([0.0, 0.0])
    plain = TrustedScore(_Recorder(), test="fltrust", reference=reference)
    by_labels = TrustedScore(_Recorder(), test="fltrust", by_labels="push", reference=reference)
    # a device holding only label 1 pushes what raises label 1 and lowers label 0: against the whole g_s
    # its cosine is 0 (dropped), against label 1's it is 0.71 (kept)
    own = [-1.0, 1.0]
    assert plain.receive(_labelled(own, [0, 5, 0], "a")) == 0.0
    assert by_labels.receive(_labelled(own, [0, 5, 0], "a")) > 0.0
    assert by_labels.reads() == {"label_counts"} and plain.reads() == frozenset()
    # label 0's g_s is computed once per version, then reused (as the whole g_s is)
    calls = reference.calls
    by_labels.receive(_labelled([1.0, 0.0], [5, 0, 0], "b"))
    by_labels.receive(_labelled([1.0, 0.0], [5, 0, 0], "c"))
    assert reference.calls == calls + 1
    # a claim of a label no trusted sample has (2) is scored against the whole g_s: −g is still dropped
    assert by_labels.receive(_labelled([-1.0, -1.0], [0, 0, 9], "d")) == 0.0


def test_fltrust_by_the_devices_labels_remembers_what_it_claimed_and_caps_the_weight():
    reference = LabelledReference([0.0, 0.0])
    strategy = TrustedScore(_Recorder(), test="fltrust", by_labels="device", max_weight=1.0,
                            reference=reference)  # fmt: skip
    for task in ("a", "b", "c"):  # a device that trained on label 0 only
        strategy.receive(_labelled([1.0, 0.0], [5, 0, 0], task))
    # now it claims label 1 for a push that points along label 1: its record (15 of label 0, 5 of label 1)
    # is scored, not this claim: cos([0, 1], [0.75, 0.25]) = 0.32, below its standing so far, so it weighs
    # less than 1 (with max_weight 1, nothing ever weighs more)
    strategy.receive(_labelled([0.0, 1.0], [0, 5, 0], "d"))
    np.testing.assert_allclose(strategy.labels_seen["d"], [15, 5, 0])
    assert np.linalg.norm(strategy.inner.seen[-1].gradient) < 1.0
    assert all(np.linalg.norm(a.gradient) <= 1.0 + 1e-6 for a in strategy.inner.seen)
    restored = TrustedScore(_Recorder(), test="fltrust", by_labels="device", reference=reference)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    np.testing.assert_allclose(restored.labels_seen["d"], [15, 5, 0])


def test_fltrust_gain_scales_every_weighed_gradient_and_drops_the_same_ones():
    """``gain`` multiplies the weight FLTrust gives, so each push's share of the step is as at 1x."""
    reference = LabelledReference([0.0, 0.0])
    plain = TrustedScore(_Recorder(), test="fltrust", by_labels="device", max_weight=1.0, reference=reference)
    gained = TrustedScore(
        _Recorder(), test="fltrust", by_labels="device", max_weight=1.0, gain=1.5, reference=reference
    )
    pushes = [([1.0, 0.0], [5, 0, 0], "a"), ([0.0, 1.0], [0, 5, 0], "b"), ([-1.0, 0.0], [5, 0, 0], "c")]
    for gradient, counts, task in pushes:
        assert (plain.receive(_labelled(gradient, counts, task)) == 0.0) == (
            gained.receive(_labelled(gradient, counts, task)) == 0.0
        )
    assert plain.dropped == gained.dropped == 1
    for one, other in zip(plain.inner.seen, gained.inner.seen, strict=True):
        np.testing.assert_allclose(other.gradient, 1.5 * one.gradient, rtol=1e-6)


def _claiming(gradient, counts, task: str, device: str) -> Arrival:
    g = np.asarray(gradient, np.float32)
    return Arrival(task, device, 0, 0, g, np.asarray(counts), 2, 1.0, 0.0)


def test_fltrust_veto_drops_a_device_pointing_away_from_the_whole_reference_whatever_it_claims():
    reference = LabelledReference([0.0, 0.0])  # label 1's g_s [0, 1]; the whole g_s [1, 1]
    veto = TrustedScore(_Recorder(), test="fltrust", by_labels="device", device_memory=3, veto=0.2,
                        veto_memory=3, reference=reference)  # fmt: skip
    plain = TrustedScore(_Recorder(), test="fltrust", by_labels="device", device_memory=3,
                         reference=reference)  # fmt: skip
    for strategy in (veto, plain):
        for i in range(4):  # honest, label 1: cos 0.71 with the whole g_s
            assert strategy.receive(_claiming([0.0, 1.0], [0, 5, 0], f"h{i}", "honest")) > 0
        for i in range(4):  # claims label 1 and agrees with it a little, but against the whole g_s: cos −0.51
            strategy.receive(_claiming([-1.0, 0.3], [0, 5, 0], f"a{i}", "attacker"))
    assert plain.dropped == 0 and veto.vetoed == veto.dropped == 4 and veto.last_dropped == "a3"
    assert veto.whole_standing["attacker"] < -0.2 < 0.7 < veto.whole_standing["honest"]
    assert veto.receive(_claiming([0.0, 1.0], [0, 5, 0], "h", "honest")) > 0  # the honest device still passes
    restored = TrustedScore(_Recorder(), test="fltrust", veto=0.2, reference=reference)
    restored.load_state_dict(decode_state(encode_state(veto.state_dict())))
    assert restored.whole_standing == pytest.approx(veto.whole_standing) and restored.vetoed == 4
    with pytest.raises(ValueError):
        TrustedScoreSettings(veto=-0.1)


def test_the_trusted_gradient_is_computed_once_a_version_and_shared_read_only():
    """trusted-score and label-check both ask for it each version: the second gets the first's."""
    from types import SimpleNamespace

    from models.manifest import builtin
    from server.compose import TrustedGradient

    bundle = builtin("logreg")
    rng = np.random.default_rng(0)
    port = TrustedGradient(rng.random((20, 784), dtype=np.float32), np.arange(20) % 10)
    run = SimpleNamespace(model_id="m", version=1, params=bundle.init_params, manifest=bundle.manifest)
    port.coordinator = SimpleNamespace(run=run, catalog=SimpleNamespace(graph=lambda *_: bundle.train_onnx))
    first = port.gradient()
    assert port.gradient() is first and port.gradient(3) is port.gradient(3) is not first
    with pytest.raises(ValueError):
        first[0] = 1.0  # shared: no caller may change it
    run.version, run.params = 2, bundle.init_params + 0.01
    moved = port.gradient()
    assert moved is not first and not np.allclose(moved, first)


def test_the_servers_class_templates_are_the_mlps_hidden_features_averaged_by_class():
    """label-check's templates through the server's port (the devices' ONNX graph, one sample at a time)
    equal the hidden layer computed directly: ReLU(W1 x + b1), averaged by class, less the classes' mean."""
    from types import SimpleNamespace

    from models.manifest import builtin
    from server.compose import TrustedGradient

    bundle = builtin("mlp")
    rng = np.random.default_rng(1)
    x, y = rng.random((30, 784), dtype=np.float32), np.arange(30) % 10
    port = TrustedGradient(x, y)
    assert port.templates() is None  # no model trains yet
    params = bundle.init_params + rng.normal(0, 0.01, bundle.init_params.size).astype(np.float32)
    run = SimpleNamespace(model_id="m", version=1, params=params, manifest=bundle.manifest)
    port.coordinator = SimpleNamespace(run=run, catalog=SimpleNamespace(graph=lambda *_: bundle.train_onnx))
    parts = bundle.manifest.split(params)
    hidden = np.maximum(x @ parts["fc1.weight"].T + parts["fc1.bias"], 0.0).astype(np.float64)
    means = np.stack([hidden[y == c].mean(axis=0) for c in range(10)])
    assert np.allclose(port.templates(), means - means.mean(axis=0), atol=1e-4)


class HeadedReference(FixedReference):
    """g_s with its last two entries the output layer (``head``: weight, bias)."""

    def head(self) -> tuple[slice, slice]:
        n = len(self.value)
        return slice(n - 2, n - 1), slice(n - 1, n)


def test_fltrust_parts_each_keeps_the_lower_of_the_head_and_body_cosines():
    reference = HeadedReference([1.0, 0.0, 0.0, 2.0, 0.0])  # body [1, 0, 0], head [2, 0]
    # an honest head with a body pointing away: as a whole it agrees (cos 0.76), by parts it does not
    honest_head = [-1.0, 0.0, 0.0, 4.0, 0.0]
    whole = TrustedScore(_Recorder(), test="fltrust", reference=reference)
    each = TrustedScore(_Recorder(), test="fltrust", reference=reference, parts="each")
    assert whole.score(np.asarray(honest_head, np.float32), reference.value) == pytest.approx(7 / np.sqrt(85))
    assert each.score(np.asarray(honest_head, np.float32), reference.value) == pytest.approx(-1.0)
    assert whole.receive(arrival(honest_head, "a")) > 0 and each.receive(arrival(honest_head, "a")) == 0.0
    # a gradient that agrees in both parts scores the lower of the two
    agrees = np.asarray([1.0, 1.0, 0.0, 1.0, 0.0], np.float32)
    assert each.score(agrees, reference.value) == pytest.approx(min(1 / np.sqrt(2), 1.0))
    # a model that is all output layer (logistic regression) is scored as a whole
    flat = TrustedScore(_Recorder(), test="fltrust", reference=HeadedReference([2.0, 0.0]), parts="each")
    assert flat.score(
        np.asarray([1.0, 1.0], np.float32), np.asarray([2.0, 0.0], np.float32)
    ) == pytest.approx(1 / np.sqrt(2))
