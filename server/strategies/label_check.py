"""``LabelCheck``: hold each push to the labels it says it trained on, at the model's output layer (issue 30).

Two tests, both on the output layer (``Manifest.head``: weight W, bias b) of a softmax cross-entropy
averaged over the batch, where ∂b_c = mean p_c − freq_c:

- **The claim** (exact): mean p_c lies in [0, 1], so an honest push has −∂b_c ≤ freq_c for every class.
  A push that says it left out labels its batch held breaks it, whatever its size or direction; an
  attacker that lied about its labels to a label-reading defence (sim/adversary.py ``claim``) is caught
  on more than 90% of its pushes (lab/probes/backdoor_rows.py), an honest device never.
- **The rows**: for each class making up at least ``share`` of the claim, the cosine of the push's row
  W_c with the same row of the trusted gradient on the claimed mix (Σ_c freq_c g_s(c)). Honest rows pull
  W_c toward the features of class c; a backdoor's batch, its triggered digits relabelled to the target,
  pulls the target's row toward the features of other digits. A device whose standing (an exponential
  average of its lowest such cosine over its last ~``memory`` pushes) falls under ``threshold`` is given
  weight 0. With no attack installed, seed 1000's per-device medians were 0.53-0.92 honest and −0.89 to
  0.00 for the six backdoor devices (lab/probes/backdoor_rows.py --oracle).

**Settling** (``settled``): late in training an honest device's rows and the trusted ones are both made of
what the model still gets wrong, and for a device whose digits the trusted ones do not resemble they
disagree: at 4x the experiment's horizon, with no attack, threshold 0 gave weight 0 to 12% of honest pushes
(seven devices of twenty, a feedback: dropped, their digits stay unlearnt). A backdoor's rows disagree more
by then (standings −0.5 to −0.9; most honest devices' 0.6-0.8, the drifting ones' −0.1 to −0.4). So the
threshold moves from ``threshold`` to
``settled`` as the fleet's bias residual (½‖∂b‖₁: how far the mean prediction is from the batch's
labels; the median over the last ``window`` pushes it passed) falls from ``residual`` to 0: strict while the
model learns, lenient once it fits. With no attack it cut the honest drops at 4x to 3%; under attack the
devices dropped while it was strict had drifted past it, and 12-14% were still dropped
(docs/robustness-history.md, the eleventh look).

**Templates** (``template_every``): late in training the trusted gradient's row is made of the few trusted
digits of c the model still gets wrong, and an honest device whose digits are unlike them drifts under the
threshold however it settles (seed 3, 12,000 pushes: up to 20% of honest pushes at weight 0). The class's
*template* does not depend on what the model gets wrong: the mean features the output layer reads on the
trusted digits of c, less their mean over the classes (``class_templates``). An honest −∂W_c adds the
features of c's digits; a backdoor's target row adds those of other digits carrying the trigger. A device's
standing is then the larger of its standings against the trusted rows and against the templates: it fails
only when its rows disagree with both (lab/probes/row_templates.py: on the tuning seeds at 12,000 pushes,
honest standings stayed above −0.2 and the backdoor's under −0.5, where the trusted rows alone put honest
ones down to −0.54). Inside the recommended defence that let backdoor-inset6 through (12% on seed 1000);
``template_mix="settling"`` instead moves one score from the trusted rows' cosine to the templates' as the
fleet settles, the trusted rows while the model learns and the templates once it fits (3.6%, and a third to
a fifth of the honest weight the rows alone took). ``residual_quantile`` below 0.5 settles a fleet whose
passed pushes are largely an attacker's with a high residual (label-flip: docs/robustness-history.md, the
thirteenth look).

**The nearest template** (``nearest``): label-flip trains on y → 9 − y and tells the flipped labels, so
its claim is true and its rows agree with the trusted ones often enough to pass; on seed 1004 it took the
fleet to 0.774 inside the recommended defence. Each of its claimed rows is made of another class's digits,
and ranks that class's template first: a device's mean margin (the cosine of −∂W_c with c's template less
the largest with another's) −0.36 to −1.3, honest ones −0.45 and above (lab/probes/label_flip.py, tuning
seeds): a partial separation. A device whose standing in it falls under ``nearest`` is dropped, the
threshold moving there from −2 as the fleet settles.

An attack that keeps the output layer honest (``honest_head``) passes both tests, and ALIE that way took the
fleet to 0.48 inside it with FLTrust (docs/robustness-history.md): an option, not the recommended defence.
It reads ``label_counts``, so it is refused with DP on; it takes its trusted digits from the
``trusted-score`` entry configured with it (server/compose.py ``trusted_gradient``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.core.ports import ReferenceGradient
from server.strategies.base import Arrival, Strategy
from server.strategies.by_label import LabelGradients
from server.strategies.trusted_score import TrustedScore
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


class LabelCheckSettings(WrapperSettings):
    name: Literal["label-check"] = "label-check"
    threshold: float | None = Field(
        None,
        ge=-1,
        le=1,
        description="a device whose rows' standing falls under this is dropped (unset: no row test)",
    )
    memory: int = Field(
        10, ge=0, description="a device's standing averages its last ~this many pushes (0: each alone)"
    )
    share: float = Field(
        0.2, gt=0, le=1, description="the rows tested: classes making up at least this of a claim"
    )
    tolerance: float = Field(1e-4, ge=0, description="the claim test's slack for rounding")
    settled: float | None = Field(
        None,
        ge=-1,
        le=1,
        description="the row test's threshold once the fleet's bias residual is 0 (unset: never settles)",
    )
    residual: float = Field(
        0.1, gt=0, le=1, description="the fleet's bias residual at and above which the threshold is unsettled"
    )
    window: int = Field(200, ge=1, le=100_000, description="the bias residual is taken over this many")
    residual_quantile: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="the fleet's bias residual is this quantile of the last pushes passed (0.5: the median;"
        " lower holds while more of the passed pushes are an attacker's, whose residual stays high)",
    )
    ramp: float = Field(
        0.0,
        ge=0,
        le=2,
        description="once settled, a standing this far under the threshold gets weight 0, one between"
        " a share (0: every standing under it gets 0)",
    )
    template_every: int = Field(
        0,
        ge=0,
        le=10_000,
        description="the class templates, recomputed every this many versions: a device's standing is the"
        " larger of its standings against the trusted rows and against them (0: the trusted rows alone)",
    )
    nearest: float | None = Field(
        None,
        ge=-2,
        le=2,
        description="with templates: a device whose standing in its claimed rows' margin among the class"
        " templates (the cosine of −∂W_c with c's template less the largest with another class's) falls"
        " under this gets weight 0, the threshold moving there from −2 as the fleet settles when ``settled``"
        " is set (unset: no such test)",
    )
    template_mix: Literal["larger", "settling"] = Field(
        "larger",
        description="with templates: the larger of the two standings, or one standing whose score moves"
        " from the trusted rows' cosine to the templates' as the fleet settles (with ``settled`` set)",
    )


def class_means(
    gradient_of_one: Callable[[np.ndarray, np.ndarray], np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    head: tuple[slice, slice],
) -> tuple[np.ndarray, np.ndarray]:
    """Each class's mean features at the output layer's input over the samples ``x`` of that class, and how
    many samples each mean is of (0: none, its mean 0). For softmax cross-entropy a one-sample gradient is
    ∂W_k = (p_k − y_k) h and ∂b_k = p_k − y_k, so h = ∂W_k / ∂b_k at the largest |∂b_k|: the features come
    from the training graph the devices run, one sample at a time (``gradient_of_one``)."""
    classes = head[1].stop - head[1].start
    sums = np.zeros((classes, (head[0].stop - head[0].start) // classes))
    counts = np.zeros(classes)
    for i in range(len(y)):
        gradient = gradient_of_one(x[i : i + 1], y[i : i + 1])
        weight, bias = gradient[head[0]].reshape(classes, -1).astype(np.float64), gradient[head[1]]
        k = int(np.argmax(np.abs(bias)))
        if bias[k] == 0:  # a sample fitted to float precision: no features to read
            continue
        sums[int(y[i])] += weight[k] / float(bias[k])
        counts[int(y[i])] += 1
    return sums / np.maximum(counts, 1)[:, None], counts


def class_templates(
    gradient_of_one: Callable[[np.ndarray, np.ndarray], np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    head: tuple[slice, slice],
) -> np.ndarray:
    """Each class's mean features (``class_means``) less their mean over the classes present (0 for a
    class with none)."""
    means, counts = class_means(gradient_of_one, x, y, head)
    if not counts.any():
        return np.zeros_like(means, dtype=np.float32)
    templates = means - means[counts > 0].mean(axis=0)
    templates[counts == 0] = 0.0
    return templates.astype(np.float32)


remembered = TrustedScore.remembered  # a device's standing: the exponential average of its last scores


class LabelCheck(StrategyWrapper):
    settings = LabelCheckSettings
    uses_reference = True  # server/strategies/__init__.py ``wrap`` gives it the trusted gradient port

    def __init__(
        self,
        inner: Strategy,
        *,
        threshold: float | None = None,
        memory: int = 10,
        share: float = 0.2,
        tolerance: float = 1e-4,
        settled: float | None = None,
        residual: float = 0.1,
        window: int = 200,
        residual_quantile: float = 0.5,
        ramp: float = 0.0,
        template_every: int = 0,
        template_mix: str = "larger",
        nearest: float | None = None,
        reference: ReferenceGradient | None = None,
    ) -> None:
        super().__init__(inner)
        self.threshold, self.memory, self.share, self.tolerance = threshold, memory, share, tolerance
        self.settled, self.residual, self.ramp = settled, residual, ramp
        self.residuals: deque[float] = deque(maxlen=window)  # the bias residuals of the pushes passed
        self.residual_quantile = residual_quantile
        self.reference = reference
        self.standing: dict[str, float] = {}
        self.template_every, self.template_mix = template_every, template_mix
        self.template_standing: dict[str, float] = {}  # against the class templates
        self.templates: np.ndarray | None = None
        self.templates_at: int | None = None  # the version they are of
        if nearest is not None and not template_every:
            raise ValueError("label-check: the nearest-template test needs the templates (template_every)")
        self.nearest = nearest
        self.margin_standing: dict[str, float] = {}  # the nearest-template test's
        self.by_label = LabelGradients()
        self.received = self.false_claims = self.row_drops = self.nearest_drops = 0
        # each device's pushes weighed down by the ramp, and the weight taken off them (in pushes)
        self.shrunk_by_device: Counter[str] = Counter()
        self.removed_by_device: Counter[str] = Counter()

    @property
    def row_shrunk(self) -> int:
        """The pushes the ramp weighed down, every device's."""
        return sum(self.shrunk_by_device.values())

    def reads(self) -> frozenset[str]:
        return frozenset({"label_counts"}) | self.inner.reads()

    def labelled(self, version: int, label: int) -> np.ndarray | None:
        """g_s on the trusted samples of ``label``, once per version."""
        return self.by_label.of(self.reference, version, label)

    def lies(self, bias: np.ndarray, freq: np.ndarray) -> bool:
        """Whether the bias gradient needs more of some class than the claim gives it."""
        return float(np.max(-bias.astype(np.float64) - freq)) > self.tolerance

    def rows_score(self, version: int, weight: np.ndarray, freq: np.ndarray, head: slice) -> float | None:
        """The lowest cosine of a tested claimed row with the trusted mix's; None without a trusted one."""
        mixed = None
        for label in np.flatnonzero(freq > 0):
            g = self.labelled(version, int(label))
            if g is not None:
                mixed = g[head] * freq[label] if mixed is None else mixed + g[head] * freq[label]
        if mixed is None:
            return None
        return self.lowest_cosine(weight.reshape(len(freq), -1), mixed.reshape(len(freq), -1), freq)

    def current_templates(self, version: int, classes: int) -> np.ndarray | None:
        """The class templates, recomputed every ``template_every`` versions (``class_templates``: one
        gradient per trusted sample); None when templates are off, the port has none or another head."""
        if not self.template_every or self.reference is None:
            return None
        if self.templates_at is None or not 0 <= version - self.templates_at < self.template_every:
            self.templates, self.templates_at = self.reference.templates(), version
        if self.templates is None or self.templates.shape[0] != classes:
            return None
        return self.templates

    def templates_score(self, version: int, weight: np.ndarray, freq: np.ndarray) -> float | None:
        """The lowest cosine of a tested claimed row's descent (−∂W_c) with its class's template; None
        without templates."""
        templates = self.current_templates(version, len(freq))
        if templates is None:
            return None
        return self.lowest_cosine(-weight.reshape(len(freq), -1), templates, freq)

    def margin_score(self, version: int, weight: np.ndarray, freq: np.ndarray) -> float | None:
        """The lowest margin of a tested claimed row's descent among the templates: its cosine with its
        class's less the largest with another's. A label-flipped device's rows are made of other digits
        and rank another class first (margins −0.36 to −1.3 a device, honest ones −0.45 or above on the
        tuning seeds: lab/probes/label_flip.py); None without templates."""
        templates = self.current_templates(version, len(freq))
        if templates is None:
            return None
        rows = -weight.reshape(len(freq), -1).astype(np.float64)
        norms = np.linalg.norm(templates, axis=1)
        margins = []
        for c in self.tested(freq):
            cosines = templates @ rows[c] / np.maximum(norms * float(np.linalg.norm(rows[c])), 1e-30)
            margins.append(float(cosines[c] - np.max(np.delete(cosines, c))))
        return min(margins)

    def far_from_nearest(
        self, arrival: Arrival, weight: np.ndarray, freq: np.ndarray, settledness: float
    ) -> bool:
        """Whether the device's standing in its rows' template margin, this push in, is under the test's
        threshold: with ``settled``, −2 (none is) while the fleet learns, moving to ``nearest`` as it
        settles; without, ``nearest``. Early on the templates are of a model that tells few digits apart,
        and an honest device dropped then has its digits learnt less, its margin lower: at −0.5 from the
        start, 23% of honest pushes were dropped in the first quarter of a clean run on seed 1000
        (lab/probes/label_flip.py)."""
        if self.nearest is None:
            return False
        margin = self.margin_score(arrival.base_version + arrival.staleness, weight, freq)
        if margin is None:
            return False
        threshold = self.nearest if self.settled is None else -2.0 + (self.nearest + 2.0) * settledness
        return remembered(self.margin_standing, arrival.device_id, margin, self.memory) < threshold

    def tested(self, freq: np.ndarray) -> np.ndarray:
        """The claimed classes the row tests read: at least ``share`` of the claim, or its largest."""
        return np.flatnonzero(freq >= min(self.share, float(freq.max())))

    def lowest_cosine(self, rows: np.ndarray, references: np.ndarray, freq: np.ndarray) -> float:
        """The lowest cosine of a tested row (a class making up at least ``share`` of the claim, or the
        claim's largest) with the same row of ``references``."""
        return min(
            float(rows[c] @ references[c])
            / max(float(np.linalg.norm(rows[c]) * np.linalg.norm(references[c])), 1e-30)
            for c in self.tested(freq)
        )

    def standing_of(
        self, arrival: Arrival, weight: np.ndarray, freq: np.ndarray, head: slice, settledness: float
    ) -> float | None:
        """The device's standing: against the trusted rows; with templates, the larger of that and its
        standing against them (both updated with this push), or (``settling``) against a score moving from
        the trusted rows' cosine to the templates' as the fleet settles."""
        version = arrival.base_version + arrival.staleness
        score = self.rows_score(version, weight, freq, head)
        template = self.templates_score(version, weight, freq)
        if template is not None and score is not None and self.template_mix == "settling":
            score = (1.0 - settledness) * score + settledness * template
            template = None
        standing = None if score is None else remembered(self.standing, arrival.device_id, score, self.memory)
        if template is None:
            return standing
        by_template = remembered(self.template_standing, arrival.device_id, template, self.memory)
        return by_template if standing is None else max(standing, by_template)

    def receive(self, arrival: Arrival) -> float:
        self.received += 1
        head = None if self.reference is None else self.reference.head()
        counts = arrival.label_counts
        if head is None or counts is None or float(np.sum(counts)) <= 0:
            return self.inner.receive(arrival)  # nothing to hold it to (a model without a softmax head)
        freq = np.asarray(counts, dtype=np.float64) / float(np.sum(counts))
        weight, bias = arrival.gradient[head[0]], arrival.gradient[head[1]]
        if self.lies(bias, freq):
            self.false_claims += 1
            return self._drop(arrival)
        settledness = self.settledness()  # one quantile of the recent residuals a push
        if self.far_from_nearest(arrival, weight, freq, settledness):
            self.nearest_drops += 1
            return self._drop(arrival)
        threshold = self.threshold_now(settledness)
        if threshold is not None:
            standing = self.standing_of(arrival, weight, freq, head[0], settledness)
            if standing is not None and standing < threshold:
                ramp = self.ramp * settledness
                share = 0.0 if ramp <= 0 else (standing - threshold + ramp) / ramp
                if share <= 0.0:
                    self.row_drops += 1
                    return self._drop(arrival)
                self.shrunk_by_device[arrival.device_id] += 1
                self.removed_by_device[arrival.device_id] += 1.0 - share
                arrival = dataclasses.replace(arrival, gradient=arrival.gradient * np.float32(share))
        self.residuals.append(0.5 * float(np.abs(bias.astype(np.float64)).sum()))  # of the pushes passed
        return self.inner.receive(arrival)

    def settledness(self) -> float:
        """0 while the fleet's bias residual (the ``residual_quantile`` of the pushes passed) is at least
        ``residual``, 1 at 0."""
        if self.settled is None or not self.residuals:
            return 0.0
        fleet = float(np.quantile(np.fromiter(self.residuals, float), self.residual_quantile))
        return 1.0 - min(fleet / self.residual, 1.0)

    def threshold_now(self, settledness: float | None = None) -> float | None:
        """The row test's threshold: ``threshold`` while the median bias residual of the last pushes it
        passed is at least ``residual``, moving linearly to ``settled`` as it falls to 0 (the pushes it
        dropped are left out: a backdoor's, whose residual stays high, would hold it strict)."""
        if self.threshold is None or self.settled is None:
            return self.threshold
        if settledness is None:
            settledness = self.settledness()
        return self.threshold + (self.settled - self.threshold) * settledness

    def _drop(self, arrival: Arrival) -> float:
        self.inner.withheld(arrival)
        return 0.0

    def describe(self) -> dict[str, Any]:
        return {
            **self.inner.describe(),
            "label_check_received": self.received,
            "label_check_dropped_false_claims": self.false_claims,
            "label_check_dropped_rows": self.row_drops,
            "label_check_dropped_nearest": self.nearest_drops,
            "label_check_shrunk_rows": self.row_shrunk,
            "label_check_threshold": None if self.threshold is None else self.threshold_now(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.inner.state_dict(),
            "label_check_standing": dict(self.standing),
            "label_check_template_standing": dict(self.template_standing),
            "label_check_margin_standing": dict(self.margin_standing),
            "label_check_residuals": list(self.residuals),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.standing = {str(k): float(v) for k, v in state.get("label_check_standing", {}).items()}
        self.template_standing = {
            str(k): float(v) for k, v in state.get("label_check_template_standing", {}).items()
        }
        margins = state.get("label_check_margin_standing", {})
        self.margin_standing = {str(k): float(v) for k, v in margins.items()}
        self.residuals.clear()
        self.residuals.extend(float(r) for r in state.get("label_check_residuals", []))
