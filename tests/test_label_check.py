"""Issue 30: label-check holds each push to the labels it claims, on real gradients of a bundled model."""

from __future__ import annotations

import numpy as np
import pytest

from client import GradientSession
from client._attacks.backdoor import add_trigger
from fleet_protocol.manifest import Manifest, ParamSpec
from models.manifest import builtin
from server.strategies import WRAPPERS, make_strategy, wrap
from server.strategies.base import Arrival
from server.strategies.label_check import LabelCheck, LabelCheckSettings, class_templates
from sim.data import load_mnist


class _Recorder(type(make_strategy("dynsgd"))):  # the arrivals that got through
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Arrival] = []

    def receive(self, arrival: Arrival) -> float:
        self.seen.append(arrival)
        return super().receive(arrival)


class Trusted:
    """The trusted-gradient port over a few training digits, at fixed parameters."""

    def __init__(self, session: GradientSession, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        self.session, self.params, self.x, self.y = session, params, x, y

    def gradient(self, label: int | None = None) -> np.ndarray | None:
        rows = slice(None) if label is None else self.y == label
        if not len(self.y[rows]):
            return None
        return self.session.loss_and_gradient(self.params, self.x[rows], self.y[rows])[1]

    def head(self) -> tuple[slice, slice] | None:
        return self.session.manifest.head()

    def templates(self) -> np.ndarray | None:
        head = self.head()
        if head is None:
            return None
        return class_templates(
            lambda x1, y1: self.session.loss_and_gradient(self.params, x1, y1)[1], self.x, self.y, head
        )


@pytest.fixture(scope="module")
def logreg():
    """Logistic regression a little trained on MNIST, its session, and digits to push from and to trust."""
    bundle = builtin("logreg")
    session = GradientSession(bundle.manifest, bundle.train_onnx)
    train, _ = load_mnist(seed=0)
    x = train.x
    params = bundle.init_params.copy()
    for start in range(0, 2000, 100):  # a few SGD steps: the rows point somewhere
        params -= (
            0.5 * session.loss_and_gradient(params, x[start : start + 100], train.y[start : start + 100])[1]
        )
    trusted = np.arange(3800, 4000)
    return session, params, x, train.y, Trusted(session, params, x[trusted], train.y[trusted])


def push(session, params, x, y, *, counts=None, device="d", task="t") -> Arrival:
    gradient = session.loss_and_gradient(params, x, y)[1]
    claimed = np.bincount(y, minlength=10) if counts is None else np.asarray(counts)
    return Arrival(task, device, 0, 0, gradient, claimed, len(y), None, 0.0)


def test_the_output_layer_is_found_in_the_bundled_models_and_not_in_another():
    for name in ("mnist_cnn", "mlp", "logreg"):
        manifest = builtin(name).manifest
        weight, bias = manifest.head()
        assert bias.stop == manifest.num_params and bias.stop - bias.start == manifest.num_classes
        assert (weight.stop - weight.start) % manifest.num_classes == 0 and weight.stop == bias.start
    odd = Manifest("odd", (ParamSpec("w", (3, 10), 0), ParamSpec("b", (3,), 30)), (10,), 10)
    assert odd.head() is None


def test_an_honest_claim_always_passes_and_one_that_leaves_labels_out_never(logreg):
    session, params, x, y, trusted = logreg
    check = LabelCheck(_Recorder(), reference=trusted)
    rng = np.random.default_rng(0)
    for i in range(30):  # honest devices of one, two or many labels: −∂b_c ≤ freq_c, exactly
        labels = rng.choice(10, size=rng.integers(1, 10), replace=False)
        rows = rng.choice(np.flatnonzero(np.isin(y[:3800], labels)), 50)
        assert check.receive(push(session, params, x[rows], y[rows], task=f"h{i}")) > 0
    two = np.flatnonzero(np.isin(y[:3800], [3, 5]))[:60]
    lie = np.bincount(np.full(60, 3), minlength=10)  # holds 3s and 5s, says 3s only
    assert check.receive(push(session, params, x[two], y[two], counts=lie)) == 0.0
    flipped = push(session, params, x[two], y[two])
    flipped = Arrival("f", "a", 0, 0, -flipped.gradient, flipped.label_counts, 60, None, 0.0)
    assert check.receive(flipped) == 0.0  # −g: mean p_c > 0 of a class it never held
    assert check.false_claims == 2 and check.row_drops == 0 and len(check.inner.seen) == 30
    assert check.reads() == {"label_counts"}


def test_the_row_test_drops_a_poisoned_batch_told_truthfully_and_keeps_the_honest_device(logreg):
    session, params, x, y, trusted = logreg
    check = LabelCheck(_Recorder(), threshold=0.25, reference=trusted)
    rng = np.random.default_rng(1)
    own = np.flatnonzero(np.isin(y[:3800], [3, 5]))
    for i in range(10):
        rows = rng.choice(own, 60)
        assert check.receive(push(session, params, x[rows], y[rows], device="honest", task=f"h{i}")) > 0
        poisoned_x, poisoned_y = x[rows].copy(), y[rows].copy()
        half = rng.random(60) < 0.5  # a backdoor: half of each batch triggered and relabelled 0
        poisoned_x[half] = add_trigger(poisoned_x[half])
        poisoned_y[half] = 0
        check.receive(push(session, params, poisoned_x, poisoned_y, device="backdoor", task=f"b{i}"))
    assert check.standing["backdoor"] < 0.25 < check.standing["honest"]
    assert check.row_drops >= 5 and check.false_claims == 0  # its claim (0s, 3s, 5s) was the truth
    assert {a.device_id for a in check.inner.seen} <= {"honest", "backdoor"}

    restarted = LabelCheck(_Recorder(), threshold=0.25, reference=trusted)
    restarted.load_state_dict(check.state_dict())
    assert restarted.standing == check.standing


def test_a_model_without_a_softmax_head_or_a_push_without_counts_passes_untested(logreg):
    session, params, x, y, trusted = logreg

    class Headless(Trusted):
        def head(self):
            return None

    check = LabelCheck(_Recorder(), threshold=0.9, reference=Headless(session, params, x, y))
    lie = push(session, params, x[:50], y[:50], counts=np.eye(10)[0] * 50)
    assert check.receive(lie) > 0
    nothing = Arrival("n", "d", 0, 0, lie.gradient, None, 50, None, 0.0)
    assert LabelCheck(_Recorder(), reference=trusted).receive(nothing) > 0


def test_the_settings_register_it_and_it_needs_a_trusted_score_entry(tmp_path):
    from pydantic import ValidationError

    from server.settings import Settings

    assert WRAPPERS["label-check"] is LabelCheck and LabelCheckSettings().threshold is None
    with pytest.raises(ValidationError, match="requires a trusted-score entry"):
        Settings(_env_file=None, wrappers=["label-check"])
    data = tmp_path / "trusted.npz"
    np.savez(data, x=np.zeros((4, 1, 28, 28), np.uint8), y=np.arange(4))
    settings = Settings(
        _env_file=None, wrappers=[{"name": "trusted-score", "data": str(data)}, "label-check"]
    )
    from server.compose import build_strategy, trusted_gradient

    port = trusted_gradient(settings)
    built = build_strategy(settings, port)
    assert isinstance(built, LabelCheck) and built.reference is port
    assert wrap(make_strategy("dynsgd"), [LabelCheckSettings()], reference=port).reference is port


def test_the_threshold_settles_as_the_passed_pushes_bias_residual_falls_and_a_dropped_push_never_holds_it():
    check = LabelCheck(_Recorder(), threshold=0.0, settled=-0.3, residual=0.1, window=4)
    assert check.threshold_now() == 0.0  # nothing passed yet: strict
    check.residuals.extend([0.2, 0.2, 0.2, 0.2])  # the model still learning: strict
    assert check.threshold_now() == 0.0
    check.residuals.extend([0.05, 0.05, 0.05, 0.05])  # halfway to fitting: halfway to settled
    assert check.threshold_now() == pytest.approx(-0.15)
    check.residuals.extend([0.0] * 4)
    assert check.threshold_now() == pytest.approx(-0.3)
    assert LabelCheck(_Recorder(), threshold=0.25).threshold_now() == 0.25  # no settling: fixed
    # 40% of the passed pushes an attacker's that the row test misses, their residual high: the median is
    # the top of the honest pushes' (0.14), the lower quartile their middle (0.045)
    mixed = [0.0, 0.02, 0.04, 0.06, 0.08, 0.2] + [0.9] * 4
    median = LabelCheck(_Recorder(), threshold=0.0, settled=-0.3, residual=0.1, window=10)
    quartile = LabelCheck(
        _Recorder(), threshold=0.0, settled=-0.3, residual=0.1, window=10, residual_quantile=0.25
    )
    median.residuals.extend(mixed)
    quartile.residuals.extend(mixed)
    assert median.threshold_now() == 0.0  # held strict
    assert quartile.threshold_now() == pytest.approx(-0.3 * (1 - 0.045 / 0.1))


def test_a_settled_row_test_keeps_a_device_it_would_drop_strict_and_still_drops_a_backdoor(logreg):
    session, params, x, y, trusted = logreg
    rng = np.random.default_rng(2)
    own = np.flatnonzero(np.isin(y[:3800], [3, 5]))
    strict = LabelCheck(_Recorder(), threshold=0.95, memory=0, reference=trusted)
    settled = LabelCheck(
        _Recorder(), threshold=0.95, settled=-0.2, residual=1.0, window=1000, memory=0, reference=trusted
    )
    settled.residuals.extend([0.0] * 200)  # a fleet that fits its data: the threshold at −0.2
    rows = rng.choice(own, 60)
    honest = push(session, params, x[rows], y[rows], device="honest")
    assert strict.receive(honest) == 0.0 and settled.receive(honest) > 0  # its rows' cosine: 0.80
    poisoned_x, poisoned_y = x[rows].copy(), y[rows].copy()
    poisoned_x[:20] = add_trigger(poisoned_x[:20])  # its rows' cosine: −0.36
    poisoned_y[:20] = 0
    backdoor = push(session, params, poisoned_x, poisoned_y, device="backdoor")
    assert settled.receive(backdoor) == 0.0 and settled.row_drops == 1
    assert len(settled.residuals) == 201  # the honest push's residual joined, the backdoor's did not
    restarted = LabelCheck(_Recorder(), threshold=0.95, settled=-0.2, residual=1.0, window=1000)
    restarted.load_state_dict(settled.state_dict())
    assert list(restarted.residuals) == list(settled.residuals)  # a restart does not make it strict again


def test_once_settled_a_standing_just_under_the_threshold_is_weighed_down_not_dropped(logreg):
    session, params, x, y, trusted = logreg
    rows = np.random.default_rng(2).choice(np.flatnonzero(np.isin(y[:3800], [3, 5])), 60)
    honest = push(session, params, x[rows], y[rows], device="honest")  # its rows' cosine: 0.80
    ramped = LabelCheck(_Recorder(), threshold=0.95, settled=0.9, ramp=0.2, memory=0, reference=trusted)
    assert ramped.receive(honest) == 0.0  # not settled yet (no residual): strict, no ramp
    ramped.residuals.extend([0.0] * 200)  # settled: the threshold at 0.9, weight 0 at 0.7 and under
    assert ramped.receive(honest) > 0 and ramped.row_shrunk == 1 and ramped.row_drops == 1
    moved = honest.gradient != 0
    share = ramped.inner.seen[-1].gradient[moved] / honest.gradient[moved]
    assert np.allclose(share, share[0]) and share[0] == pytest.approx((0.80 - 0.7) / 0.2, abs=0.01)
    # counted by device with the weight taken off (in pushes): an experiment splits honest from Byzantine
    assert ramped.shrunk_by_device == {"honest": 1}
    assert ramped.removed_by_device["honest"] == pytest.approx(1.0 - share[0], abs=1e-4)


def test_the_class_templates_are_the_features_the_output_layer_reads_averaged_by_class(logreg):
    """Logistic regression's output layer reads the pixels: its templates are each class's mean digit,
    less the mean over the classes, read back from one-digit gradients (h = ∂W_k / ∂b_k)."""
    session, params, x, y, trusted = logreg
    templates = trusted.templates()
    pixels = trusted.x.reshape(len(trusted.y), -1).astype(np.float64)
    means = np.stack([pixels[trusted.y == c].mean(axis=0) for c in range(10)])
    assert templates.shape == means.shape
    assert np.allclose(templates, means - means.mean(axis=0), atol=1e-4)
    only = trusted.y != 7  # a class with no trusted sample: a zero template, left out of the mean
    partial = class_templates(
        lambda x1, y1: session.loss_and_gradient(params, x1, y1)[1], trusted.x[only], trusted.y[only],
        trusted.head(),
    )  # fmt: skip
    kept = [c for c in range(10) if c != 7]
    assert np.all(partial[7] == 0)
    assert np.allclose(partial[kept], means[kept] - means[kept].mean(axis=0), atol=1e-4)


def test_with_templates_a_device_fails_the_row_test_only_when_its_rows_disagree_with_both_references(logreg):
    session, params, x, y, trusted = logreg
    rng = np.random.default_rng(3)
    own = np.flatnonzero(np.isin(y[:3800], [3, 5]))

    plain = LabelCheck(_Recorder(), threshold=0.0, memory=1, reference=Misleading(*trusted_args(trusted)))
    both = LabelCheck(
        _Recorder(), threshold=0.0, memory=1, template_every=5, reference=Misleading(*trusted_args(trusted))
    )
    rows = rng.choice(own, 60)
    honest = push(session, params, x[rows], y[rows], device="honest")
    assert plain.receive(honest) == 0.0  # the trusted rows alone drop it
    assert both.receive(honest) > 0 and both.template_standing["honest"] > 0.1
    # rows that pull each claimed class away from its own digits (the bias, and so the claim, kept honest)
    weight = trusted.head()[0]
    turned = honest.gradient.copy()
    turned[weight] = -turned[weight]
    good = LabelCheck(_Recorder(), threshold=0.0, memory=1, template_every=5, reference=trusted)
    assert good.receive(Arrival("b", "turned", 0, 0, turned, honest.label_counts, 60, None, 0.0)) == 0.0
    assert good.standing["turned"] < 0 and good.template_standing["turned"] < 0 and good.false_claims == 0
    assert good.receive(honest) > 0
    assert both.templates_at == 0 and both.state_dict()["label_check_template_standing"] == {
        "honest": both.template_standing["honest"]
    }


def test_settling_the_row_test_moves_from_the_trusted_rows_to_the_templates_as_the_fleet_fits(logreg):
    session, params, x, y, trusted = logreg
    rows = np.random.default_rng(3).choice(np.flatnonzero(np.isin(y[:3800], [3, 5])), 60)
    honest = push(session, params, x[rows], y[rows], device="honest")

    def check() -> LabelCheck:
        misleading = Misleading(*trusted_args(trusted))
        return LabelCheck(_Recorder(), threshold=0.0, memory=1, template_every=5, template_mix="settling",
                          settled=0.0, residual=0.1, reference=misleading)  # fmt: skip

    learning, fitted = check(), check()
    learning.residuals.extend([0.5] * 10)  # the model still learning: the trusted rows' cosine alone
    fitted.residuals.extend([0.0] * 10)  # fitted: the templates' alone
    assert learning.receive(honest) == 0.0 and learning.standing["honest"] < 0
    assert fitted.receive(honest) > 0 and fitted.standing["honest"] > 0.1
    assert fitted.template_standing == {}  # one standing, not two


class Misleading(Trusted):
    """Trusted rows pointing away from every honest push: a drifted reference."""

    def gradient(self, label: int | None = None) -> np.ndarray | None:
        g = super().gradient(label)
        return None if g is None else -g


def trusted_args(trusted: Trusted) -> tuple:
    return trusted.session, trusted.params, trusted.x, trusted.y


def test_the_nearest_template_test_drops_a_label_flipped_device_and_keeps_the_honest_one(logreg):
    """Label-flip trains on y → 9 − y and tells the flipped labels: its claim is true and its rows agree
    enough with the trusted ones, but each claimed row is made of another class's digits, whose template
    it ranks first (lab/probes/label_flip.py)."""
    session, params, x, y, trusted = logreg
    rng = np.random.default_rng(5)
    own = np.flatnonzero(np.isin(y[:3800], [0, 6]))
    check = LabelCheck(_Recorder(), memory=5, template_every=5, nearest=-0.5, reference=trusted)
    for i in range(6):
        rows = rng.choice(own, 60)
        honest = push(session, params, x[rows], y[rows], device="honest", task=f"h{i}")
        flipped = push(session, params, x[rows], 9 - y[rows], device="flipped", task=f"f{i}")
        assert check.receive(honest) > 0
        assert check.receive(flipped) == 0.0
    assert check.margin_standing["honest"] > 0 > -0.5 > check.margin_standing["flipped"]
    assert check.nearest_drops == 6 and check.false_claims == 0
    assert check.describe()["label_check_dropped_nearest"] == 6
    restored = LabelCheck(_Recorder(), memory=5, template_every=5, nearest=-0.5, reference=trusted)
    restored.load_state_dict(check.state_dict())
    assert restored.margin_standing == check.margin_standing
    # settling: off while the fleet's residual is high (the templates of a model still learning), on once fit
    learning = LabelCheck(
        _Recorder(), memory=5, template_every=5, nearest=-0.5, settled=-0.2, reference=trusted
    )
    learning.residuals.extend([0.5] * 10)
    assert learning.receive(flipped) > 0
    learning.residuals.extend([0.0] * 200)
    assert learning.receive(flipped) == 0.0
    with pytest.raises(ValueError, match="template_every"):
        LabelCheck(_Recorder(), nearest=-0.5, reference=trusted)
    assert LabelCheckSettings(nearest=-0.5, template_every=20).nearest == -0.5
