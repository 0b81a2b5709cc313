"""Issue 30, FLTrust (``trusted-score`` with ``test="fltrust"``): weighing by agreement with the trusted
gradient, at its norm or the fleet's, by a device's standing and its labels, its floor, veto, gain, weight
cap and parts, on small hand-made arrays."""

from __future__ import annotations

import numpy as np
import pytest

from server.store.codec import decode_state, encode_state
from server.strategies import Arrival, FedBuff, TrustedScore
from server.strategies.trusted_score import TrustedScoreSettings
from tests.test_robust_wrappers import FixedReference, arrival


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


class ThreeClassReference(FixedReference):
    """A three-class softmax head (weights 0-2, biases 3-5): each label's g_s its own two coordinates."""

    def gradient(self, label=None) -> np.ndarray | None:
        self.calls += 1
        if label is None:
            return np.float32([1, 2, 1, 1, 2, 1])  # the whole: more of label 1's digits
        return np.float32(np.eye(6)[label] + np.eye(6)[label + 3]) if 0 <= label < 3 else None

    def head(self) -> tuple[slice, slice]:
        return slice(0, 3), slice(3, 6)


def test_label_veto_drops_a_device_working_against_one_labels_digits_without_reading_labels():
    reference = ThreeClassReference([0.0] * 6)
    veto = TrustedScore(_Recorder(), test="fltrust", label_veto=0.5, label_veto_memory=3, reference=reference)
    plain = TrustedScore(_Recorder(), test="fltrust", reference=reference)
    assert veto.reads() == frozenset()  # the test reads no label counts: it runs with DP on
    honest, flipped = [1, -0.2, -0.2, 1, -0.2, -0.2], [-1, 1, 0, -1, 1, 0]
    unlabelled = [
        Arrival(f"{who}{i}", who, 0, 0, np.float32(g), None, 2, 1.0, 0.0)
        for i in range(4)
        for who, g in (("honest", honest), ("flipped", flipped))
    ]  # honest: label 0's descent, a little against the others (cos −0.19); flipped: label 0's digits
    # trained as 1, against label 0's g_s (cos −0.71) and with label 1's
    for strategy in (veto, plain):
        for a in unlabelled:
            strategy.receive(a)
    assert veto.label_vetoed == 4 and veto.dropped == 4 and veto.last_dropped == "flipped3"
    assert plain.label_vetoed == 0 and plain.dropped == 0  # FLTrust alone: both agree with the whole g_s
    assert veto.label_standing["flipped"] < -0.5 < -0.2 < veto.label_standing["honest"]
    restored = TrustedScore(_Recorder(), test="fltrust", label_veto=0.5, reference=reference)
    restored.load_state_dict(decode_state(encode_state(veto.state_dict())))
    assert restored.label_standing == pytest.approx(veto.label_standing) and restored.label_vetoed == 4
    assert veto.describe()["trusted_label_vetoed"] == 4
    headless = ThreeClassReference([0.0] * 6)
    headless.head = lambda: None  # a model without a softmax head: no labels to test against
    unheaded = TrustedScore(_Recorder(), test="fltrust", label_veto=0.5, reference=headless)
    assert all(unheaded.receive(a) > 0 for a in unlabelled[1::2]) and unheaded.label_vetoed == 0
    with pytest.raises(ValueError):
        TrustedScoreSettings(label_veto=-0.1)


def _softmax_gradient(features: np.ndarray, predicted, label: int) -> np.ndarray:
    """A softmax head's loss gradient on one digit (features h, predicted p): ∂W = (p − y) h, ∂b = p − y."""
    error = np.asarray(predicted, np.float64) - np.eye(3)[label]
    return np.concatenate([np.outer(error, features).ravel(), error]).astype(np.float32)


class SoftmaxReference(FixedReference):
    """Three classes whose digits have features (1, 0), (0, 1) and (1, 1)/√2, each predicted right at 0.8:
    each label's trusted gradient as a softmax head's (weights 0-5, biases 6-8)."""

    features = (np.float64([1, 0]), np.float64([0, 1]), np.float64([1, 1]) / np.sqrt(2))

    def gradient(self, label=None) -> np.ndarray | None:
        self.calls += 1
        if label is None:
            return sum(self.gradient(k) for k in range(3))
        return _softmax_gradient(self.features[label], [0.8 if k == label else 0.1 for k in range(3)], label)

    def head(self) -> tuple[slice, slice]:
        return slice(0, 6), slice(6, 9)


def test_label_veto_by_mass_tells_a_flipped_device_from_one_the_model_confuses():
    h = SoftmaxReference.features
    pushes = {
        "flipped": _softmax_gradient(h[0], [0.8, 0.1, 0.1], 2),  # class 0's digits, known as 0, trained as 2
        "confused": _softmax_gradient(h[1], [0.5, 0.4, 0.1], 1),  # class 1's, half taken for 0
        "honest": _softmax_gradient(h[0], [0.8, 0.1, 0.1], 0),  # class 0's, against class 2's (shared ink)
    }  # lowest cosines with one label's g_s: −0.81, −0.39, −0.43; times the mass there: −0.65, −0.19, −0.04
    plain = TrustedScore(_Recorder(), test="fltrust", label_veto=0.3, label_veto_memory=1,
                         reference=SoftmaxReference([0.0]))  # fmt: skip
    by_mass = TrustedScore(_Recorder(), test="fltrust", label_veto=0.3, label_veto_memory=1,
                           label_veto_mass=True, reference=SoftmaxReference([0.0]))  # fmt: skip
    for device, g in pushes.items():
        for strategy in (plain, by_mass):
            strategy.receive(Arrival(device, device, 0, 0, g, None, 2, 1.0, 0.0))
    assert plain.label_vetoed == 3  # by the cosine alone every one of them works against some class
    assert by_mass.label_vetoed == 1 and by_mass.last_dropped == "flipped"
    assert by_mass.label_standing["flipped"] == pytest.approx(-0.65, abs=0.01)


def test_the_label_stack_scores_a_push_as_each_labels_cosine_would():
    """The veto's one product over the stacked labels gives each label's cosine (times its mass), the lowest
    taken; a label with no trusted sample, or a zero g_s, is no lower than 0."""
    from server.strategies.by_label import LabelGradients, cosine, lowest_label_score

    rng = np.random.default_rng(5)
    labelled = {0: rng.normal(size=9), 1: None, 2: rng.normal(size=9), 3: np.zeros(9)}

    class Port:
        def gradient(self, label=None):
            return labelled[label]

    stack = LabelGradients().stacked(Port(), version=1, classes=4)
    head = (slice(0, 5), slice(5, 9))
    for _ in range(20):
        push = rng.normal(size=9).astype(np.float32)
        cosines = {k: cosine(push, g) for k, g in labelled.items() if g is not None}
        masses = {k: max(float(push[5 + k]), 0.0) for k in cosines}
        assert lowest_label_score(push, stack, head) == pytest.approx(min(cosines.values()), abs=1e-12)
        expected = min(c * masses[k] for k, c in cosines.items())
        assert lowest_label_score(push, stack, head, mass=True) == pytest.approx(expected, abs=1e-12)
    assert lowest_label_score(np.ones(4, np.float32), stack, head) is None  # another model's shape
    assert lowest_label_score(push, stack, None) is None  # no softmax head
    labelled.update({0: None, 2: None})
    assert LabelGradients().stacked(Port(), version=1, classes=2) is None  # no label has a trusted sample
