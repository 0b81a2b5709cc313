"""``TrustedScore``: accept a device's gradient only if it agrees with a gradient the server computes
itself on a few samples it trusts (issue 30), in one of three published forms:

* ``zeno++`` (Xie, Koyejo, Gupta 2020, "Zeno++: Robust Fully Asynchronous SGD", ICML): with g's scale
  normalised to g_s's norm (ĝ = g·‖g_s‖/‖g‖), accept iff γ⟨g_s, ĝ⟩ − ρ‖ĝ‖² ≥ −γε, γ the strategy's rate:
  the estimated descent of the trusted loss after the step is not too negative;
* ``aflguard`` (Fang, Liu, Jia, Gong 2022, "AFLGuard: Byzantine-robust Asynchronous Federated Learning",
  ACSAC): accept iff ‖g − g_s‖ ≤ λ‖g_s‖;
* ``fltrust`` (Cao, Fang, Liu, Gong 2021, "FLTrust: Byzantine-robust Federated Learning via Trust
  Bootstrapping", NDSS), made asynchronous: g is rescaled to g_s's norm and weighed by its trust score
  ReLU(cos(g, g_s)) over the mean score of the last ``window`` gradients (FLTrust divides by the round's
  sum of scores; one gradient at a time, the recent mean plays that part, so an honest gradient keeps
  about its plain weight). A gradient pointing away from g_s (cos ≤ 0) gets weight 0, one that agrees
  only a little (ALIE, IPM, noise) gets little, and none can step further than g_s would. Three options
  of ours: ``scale="fleet"`` takes the gradients at the median norm of those accepted instead of g_s's
  (a 64-sample g_s is shorter than a device's gradient, and the steps shrank: 2.3x the undefended time to
  the target on the peer workload's MLP), ``scale="fleet-down"`` only brings longer ones down to it (a
  short gradient rescaled up to the fleet's norm is amplified: IPM's −0.1μ, accepted whenever its cosine
  with a noisy g_s is briefly positive, became a full-size step against the mean), and ``device_memory``
  scores a device by the average of its last scores instead of each gradient alone (a non-IID device's
  gradient often points a little away from g_s; an attacker's always does). ``floor`` gives weight 0 to a
  score under floor × the median of the recent ones: ReLU(cos) let an attacker with a small positive score
  keep a small weight, and its norm joined the fleet's (IPM's short pushes, 43% of them on the peer MLP,
  brought the median norm and with it every honest step down to about half). ``veto`` gives weight 0 to a
  device whose standing against the *whole* g_s (its cosines with it, averaged over its last
  ~``veto_memory``) falls under −veto: scored by its labels alone, an attacker claiming a label its
  reversed gradient happens to agree with passed (sign-flip on 4s and 8s claiming 9), while against all
  the trusted digits that gradient points away.

``label_veto`` (any test) gives weight 0 to a device whose pushes work against one class's trusted digits
(label-flip's do, while they agree with the labels they claim), ``label_veto_mass`` weighs that by the mass
the model predicts on the class: server/strategies/by_label.py ``lowest_label_score``.

g_s is the loss gradient on ``samples`` held-out *training* samples (an .npz of x and y, ``data``; never
the test set: server/settings_rules.py refuses FLEET_EVAL_DATA) at the parameters the model holds now,
computed with the model's own ONNX training graph. The strategy does no I/O: the gradient comes through
the core's ``ReferenceGradient`` port (server/core/ports.py), which the composition root builds from
``data`` and ``samples`` (server/compose.py ``TrustedGradient``); without it the settings refuse the
wrapper at start-up. g_s is kept for ``refresh`` versions (Zeno++'s lazy update; 1: every version).

Defaults, measured (tests/test_robust_wrappers.py's fleet: logreg, 10 IID devices, batch 32, 100 trusted
samples, 600 pushes, 3 devices sending −10g): AFLGuard with λ = 1.5 dropped 77% of honest gradients with
no attack (a batch of 32 is noisier than that around g_s), λ = 2 about 25%, λ = 3 none while still
dropping every −10g: λ = 3 is the default. Zeno++ with ρ = 0.001, ε = 0 dropped about 30% of honest
gradients with no attack (their cosine with g_s is negative that often near convergence) and let the model
lose 8 points under attack; its ε is in the loss's units, so no default fits every model.

The test is taken at arrival, on the gradient as the device sent it (before any weighting): a rejected
gradient (for FLTrust, one scored 0) gets weight 0 and never reaches the wrapped strategy.
``trusted_dropped`` counts them and ``last_dropped`` is the task id of the latest, so an experiment can
count honest gradients dropped.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import deque
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.core.ports import ReferenceGradient
from server.strategies.base import Arrival, Strategy
from server.strategies.by_label import LabelGradients, cosine, lowest_label_score
from server.strategies.wrappers import StrategyWrapper, WrapperSettings

Test = Literal["aflguard", "zeno++", "fltrust"]
Scale = Literal["reference", "fleet", "fleet-down"]


def zeno_score(gradient: np.ndarray, reference: np.ndarray, rate: float, rho: float) -> float:
    """Zeno++'s γ⟨g_s, ĝ⟩ − ρ‖ĝ‖², ĝ the gradient scaled to the reference's norm."""
    g, s = gradient.astype(np.float64), reference.astype(np.float64)
    norm, target = float(np.linalg.norm(g)), float(np.linalg.norm(s))
    scaled = g * (target / norm) if norm > 0 else g
    return rate * float(s @ scaled) - rho * float(scaled @ scaled)


def aflguard_distance(gradient: np.ndarray, reference: np.ndarray) -> float:
    """‖g − g_s‖ / ‖g_s‖ (inf when g_s is zero and g is not): AFLGuard accepts it up to λ."""
    diff = float(np.linalg.norm(gradient.astype(np.float64) - reference))
    base = float(np.linalg.norm(reference))
    return diff / base if base > 0 else (0.0 if diff == 0 else float("inf"))


def head_start(head: tuple[slice, slice]) -> int:
    """Where the output layer (``Manifest.head``'s weight and bias) starts in the flat vector."""
    return min(head[0].start or 0, head[1].start or 0)


def device_counts(seen: dict[str, np.ndarray], device: str, counts: np.ndarray) -> np.ndarray:
    """The device's label counts so far with this push's added (kept in ``seen``): a device is what its
    data has been, not what one push says."""
    previous = seen.get(device)
    seen[device] = counts if previous is None or previous.shape != counts.shape else previous + counts
    return seen[device]


class TrustedScoreSettings(WrapperSettings):
    name: Literal["trusted-score"] = "trusted-score"
    test: Test = Field(
        "aflguard", description="AFLGuard's distance test, Zeno++'s descent score or FLTrust's trust weight"
    )
    data: str | None = Field(
        None, description="an .npz (x, y) of held-out training samples the server trusts (not the test set)"
    )
    samples: int = Field(64, ge=1, le=100_000, description="the reference gradient is taken on this many")
    distance: float = Field(3.0, gt=0, le=100, description="AFLGuard's λ: accept ‖g − g_s‖ ≤ λ‖g_s‖")
    rho: float = Field(0.001, ge=0, le=100, description="Zeno++'s ρ, the weight of ‖ĝ‖² in the score")
    slack: float = Field(0.0, ge=0, le=1e6, description="Zeno++'s ε: accept a score ≥ −γε")
    refresh: int = Field(1, ge=1, le=100_000, description="recompute g_s every this many versions")
    window: int = Field(
        100,
        ge=1,
        le=100_000,
        description="FLTrust: scores and norms are relative to the last this many",
    )
    scale: Scale = Field(
        "reference",
        description="FLTrust: gradients at g_s's norm, at the median norm of those accepted, or only"
        " the longer ones brought down to it (fleet-down)",
    )
    device_memory: int = Field(
        0,
        ge=0,
        le=10_000,
        description="FLTrust: a device's score averages its last ~this many (0: each alone)",
    )
    by_labels: Literal["none", "push", "device"] = Field(
        "none",
        description="score against g_s on the trusted samples of the labels the device trained on, by this"
        " push's label counts or by all the device's so far (reads them: not with DP)",
    )
    max_weight: float = Field(
        2.0, ge=1, le=100, description="FLTrust: no gradient weighs over this × its own"
    )
    gain: float = Field(
        1.0,
        gt=0,
        le=4,
        description="FLTrust: every weighed gradient × this (capped at a device's own weight, the weights"
        " average under 1 and the step shrinks with them)",
    )
    floor: float = Field(
        0.0,
        ge=0,
        le=1,
        description="FLTrust: a score under this × the median of the recent scores gets weight 0 (0: none)",
    )
    veto: float | None = Field(
        None,
        ge=0,
        le=1,
        description="FLTrust: a device whose standing against the whole g_s is under −veto gets weight 0",
    )
    veto_memory: int = Field(
        100, ge=1, le=10_000, description="FLTrust: the veto's standing averages a device's last ~this many"
    )
    parts: Literal["whole", "each"] = Field(
        "whole",
        description="FLTrust: score the whole gradient, or the output layer and the layers under it each"
        " and keep the lower cosine",
    )
    label_veto: float | None = Field(
        None,
        ge=0,
        le=1,
        description="a device whose standing in its pushes' lowest cosine with one label's g_s (the trusted"
        " samples of that label) is under −this gets weight 0: a push working against one class's digits"
        " (reads no labels; unset: no such test)",
    )
    label_veto_memory: int = Field(
        30, ge=1, le=10_000, description="the label veto's standing averages a device's last ~this many"
    )
    label_veto_mass: bool = Field(
        False,
        description="the label veto weighs each label's cosine by the mass the model predicts on that label"
        " over the push's batch (its bias gradient there, when positive): a push working against the class"
        " its own digits are taken for, not one the model merely confuses them with",
    )


class TrustedScore(StrategyWrapper):
    settings = TrustedScoreSettings
    uses_reference = True  # server/strategies/__init__.py ``wrap`` gives it the trusted gradient port

    def __init__(
        self,
        inner: Strategy,
        *,
        test: Test = "aflguard",
        data: str | None = None,
        samples: int = 64,
        distance: float = 3.0,
        rho: float = 0.001,
        slack: float = 0.0,
        refresh: int = 1,
        window: int = 100,
        scale: Scale = "reference",
        device_memory: int = 0,
        by_labels: Literal["none", "push", "device"] = "none",
        max_weight: float = 2.0,
        gain: float = 1.0,
        floor: float = 0.0,
        veto: float | None = None,
        veto_memory: int = 100,
        parts: Literal["whole", "each"] = "whole",
        label_veto: float | None = None,
        label_veto_memory: int = 30,
        label_veto_mass: bool = False,
        reference: ReferenceGradient | None = None,
    ) -> None:
        super().__init__(inner)
        if test not in ("aflguard", "zeno++", "fltrust"):
            raise ValueError(f"trusted-score: unknown test {test!r}")
        self.test, self.data, self.samples = test, data, samples  # data, samples: the port's (compose.py)
        self.distance, self.rho, self.slack, self.refresh = distance, rho, slack, refresh
        self.reference = reference
        self.scores: deque[float] = deque(maxlen=window)  # FLTrust: the recent trust scores
        self.norms: deque[float] = deque(maxlen=window)  # FLTrust at the fleet's scale: accepted norms
        self.scale, self.device_memory = scale, device_memory
        self.standing: dict[str, float] = {}  # FLTrust with device_memory: each device's averaged score
        self.by_labels, self.max_weight, self.floor = by_labels, max_weight, floor
        self.gain = gain
        self.veto, self.veto_memory, self.parts = veto, veto_memory, parts
        self.whole_standing: dict[str, float] = {}  # with a veto: each device's standing against all of g_s
        self.label_veto, self.label_veto_memory = label_veto, label_veto_memory
        self.label_veto_mass = label_veto_mass
        self.label_standing: dict[str, float] = {}  # with a label veto: each device's lowest-label standing
        self.labels_seen: dict[str, np.ndarray] = {}  # by_labels "device": each device's label counts so far
        self.cached: tuple[int, np.ndarray | None] | None = None  # (version, g_s)
        self.by_label = LabelGradients()
        self.received = self.dropped = self.vetoed = self.label_vetoed = 0
        self.last_dropped: str | None = None
        self.last_score: float | None = None

    def reference_gradient(self, version: int) -> np.ndarray | None:
        """g_s, recomputed when ``refresh`` versions old (or taken on another version line)."""
        if self.reference is None:
            raise RuntimeError(
                "trusted-score has no reference gradient: the composition root (server/compose.py) gives it"
                " one from the wrapper's data; build the strategy with build_strategy(settings, reference)"
            )
        if self.cached is None or not 0 <= version - self.cached[0] < self.refresh:
            self.cached = (version, self.reference.gradient())
        return self.cached[1]

    def labelled_reference(self, version: int, counts: np.ndarray) -> np.ndarray | None:
        """g_s on the trusted samples of the device's labels, mixed by its counts (``LabelGradients``)."""
        return self.by_label.mixed(self.reference, version, counts)

    def reads(self) -> frozenset[str]:
        return frozenset({"label_counts"}) if self.by_labels != "none" else frozenset()

    def passes(self, gradient: np.ndarray, reference: np.ndarray) -> bool:
        if self.test == "aflguard":
            self.last_score = aflguard_distance(gradient, reference)
            return self.last_score <= self.distance
        rate = float(self.inner.learning_rate)
        self.last_score = zeno_score(gradient, reference, rate, self.rho)
        return self.last_score >= -rate * self.slack

    @staticmethod
    def remembered(memory: dict[str, float], device: str, score: float, span: int) -> float:
        """The device's standing in ``memory``: an exponential average of its last ~``span`` scores, this
        one included (span 0: this score alone)."""
        if not span:
            return score
        previous = memory.get(device, score)
        memory[device] = previous + (score - previous) * 2 / (span + 1)
        return memory[device]

    def vetoes(self, arrival: Arrival, whole: np.ndarray | None) -> bool:
        """Whether the device's standing against the whole g_s is under −veto."""
        if self.veto is None or whole is None or whole.shape != arrival.gradient.shape:
            return False
        score = cosine(arrival.gradient, whole)
        return self.remembered(self.whole_standing, arrival.device_id, score, self.veto_memory) < -self.veto

    def label_vetoes(self, arrival: Arrival, version: int) -> bool:
        """Whether the device's standing in its pushes' lowest score against one label's g_s
        (``lowest_label_score``) is under −label_veto."""
        if self.label_veto is None or self.reference is None:
            return False
        head = self.reference.head()
        if head is None:  # no softmax output layer: no label's gradient to stand against
            return False
        stack = self.by_label.stacked(self.reference, version, head[1].stop - head[1].start)
        lowest = lowest_label_score(arrival.gradient, stack, head, mass=self.label_veto_mass)
        if lowest is None:
            return False
        standing = self.remembered(self.label_standing, arrival.device_id, lowest, self.label_veto_memory)
        return standing < -self.label_veto

    def score(self, gradient: np.ndarray, reference: np.ndarray) -> float:
        """cos(g, g_s), or with ``parts`` "each" the lower of the output layer's and the rest's: an attack
        that keeps its output layer honest (``alie-head``) agrees with g_s as a whole (median cosine 0.48
        against the honest pushes' 0.51, peer-mlp) and disagrees below it (−0.24 against 0.45)."""
        head = None if self.parts == "whole" or self.reference is None else self.reference.head()
        if head is None:
            return cosine(gradient, reference)
        start = head_start(head)
        if start == 0:  # the output layer is the whole model (logistic regression)
            return cosine(gradient, reference)
        return min(cosine(gradient[:start], reference[:start]), cosine(gradient[start:], reference[start:]))

    def trusted(self, arrival: Arrival, reference: np.ndarray, whole: np.ndarray | None) -> Arrival | None:
        """FLTrust: the arrival at g_s's norm × its relative trust score; None when the score is 0."""
        score = self.score(arrival.gradient, reference)
        if self.device_memory:
            score = self.remembered(self.standing, arrival.device_id, score, self.device_memory)
        vetoed = self.vetoes(arrival, whole)
        score = max(score, 0.0)
        self.last_score = score
        self.scores.append(score)
        mean = statistics.fmean(self.scores)
        norm = float(np.linalg.norm(arrival.gradient))
        if score <= 0.0 or mean <= 0.0 or norm <= 0.0:
            return None
        if self.floor and score < self.floor * statistics.median(self.scores):
            return None  # nor does its norm join the fleet's: IPM's short −εμ pulled the median down
        if vetoed:
            self.vetoed += 1
            return None
        self.norms.append(norm)
        # statistics' median and mean, not numpy's: the same values, at a tenth of the cost per push
        target = (
            float(np.linalg.norm(reference)) if self.scale == "reference" else statistics.median(self.norms)
        )
        resize = min(target / norm, 1.0) if self.scale == "fleet-down" else target / norm
        scale = resize * min(score / mean, self.max_weight) * self.gain
        return dataclasses.replace(arrival, gradient=arrival.gradient * np.float32(scale))

    def receive(self, arrival: Arrival) -> float:
        self.received += 1
        version = arrival.base_version + arrival.staleness
        reference = whole = self.reference_gradient(version)
        if self.by_labels != "none" and reference is not None and arrival.label_counts is not None:
            counts = np.asarray(arrival.label_counts, dtype=np.float64)
            if self.by_labels == "device":
                counts = device_counts(self.labels_seen, arrival.device_id, counts)
            # a claim of labels no trusted sample has is scored against the whole g_s, never let through
            labelled = self.labelled_reference(version, counts)
            reference = reference if labelled is None else labelled
        if reference is None or reference.shape != arrival.gradient.shape:
            return self.inner.receive(arrival)
        if self.label_vetoes(arrival, version):
            self.label_vetoed += 1
            weighed = None
        elif self.test == "fltrust":
            weighed = self.trusted(arrival, reference, whole)
        else:
            weighed = arrival if self.passes(arrival.gradient, reference) else None
        if weighed is None:
            self.dropped += 1
            self.last_dropped = arrival.task_id
            self.inner.withheld(arrival)
            return 0.0
        return self.inner.receive(weighed)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "trusted_test": self.test,
            "trusted_received": self.received,
            "trusted_dropped": self.dropped,
            "trusted_vetoed": self.vetoed,
            "trusted_label_vetoed": self.label_vetoed,
            "trusted_last_score": self.last_score,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.inner.state_dict(),
            "trusted_score": {
                "received": self.received,
                "dropped": self.dropped,
                "standing": self.standing,
                "whole_standing": self.whole_standing,
                "vetoed": self.vetoed,
                "label_standing": self.label_standing,
                "label_vetoed": self.label_vetoed,
                "labels_seen": {device: counts.tolist() for device, counts in self.labels_seen.items()},
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        trusted = state.get("trusted_score") or {}
        self.received = int(trusted.get("received", 0))
        self.dropped = int(trusted.get("dropped", 0))
        self.standing = {str(k): float(v) for k, v in (trusted.get("standing") or {}).items()}
        whole = trusted.get("whole_standing") or {}
        self.whole_standing = {str(k): float(v) for k, v in whole.items()}
        self.vetoed = int(trusted.get("vetoed", 0))
        self.label_standing = {str(k): float(v) for k, v in (trusted.get("label_standing") or {}).items()}
        self.label_vetoed = int(trusted.get("label_vetoed", 0))
        seen = trusted.get("labels_seen") or {}
        self.labels_seen = {str(k): np.asarray(v, dtype=np.float64) for k, v in seen.items()}
        self.cached = None
