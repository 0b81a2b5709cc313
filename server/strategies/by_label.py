"""The trusted gradient label by label (issue 30): each label's g_s asked of the port once a version, their
mix by a device's label counts (trusted-score, label-check and foolsgold), and the label veto's score.

**The label veto** (trusted-score ``label_veto``): label-flip trains digits of t as 9 − t and tells the
flipped labels, so its claim is true and FLTrust, scoring a push against the labels it claims, still gave it a
fifth of a weight on some seeds (docs/robustness-history.md, the fifteenth look). Its push works against the
trusted digits of t: on seed 2003 at 12,000 pushes its devices' mean lowest cosines with one label's g_s were
−0.52 to −0.65 once the model learnt, honest ones −0.08 to −0.36 (lab/probes/label_flip.py --label-cosines).
But an honest device whose digits the model confuses with a class works against that class's digits too (down
to −0.50 on seed 3003, clean), so ``mass`` weighs each label's cosine by the mass the model predicts on it
over the push's batch (the bias gradient there, mean p_k − freq_k, when positive): an attacker's digits are
taken for their own class (0.24-0.50), an honest device's seldom for the one it is confused with (≤ 0.08 once
the model learns; the sixteenth look). Neither reads a label count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from server.core.ports import ReferenceGradient


def cosine(gradient: np.ndarray, reference: np.ndarray) -> float:
    """cos(g, g_s), 0 when either is zero."""
    g, s = gradient.astype(np.float64), reference.astype(np.float64)
    norms = float(np.linalg.norm(g)) * float(np.linalg.norm(s))
    return float(g @ s) / norms if norms > 0 else 0.0


@dataclass(frozen=True)
class LabelStack:
    """Every label's g_s at one version as the rows of one float64 matrix, with the rows' norms: the label
    veto scores each push against all of them, in one product rather than a cosine a label."""

    labels: np.ndarray  # the labels with a trusted sample, one a row
    matrix: np.ndarray
    norms: np.ndarray


class LabelGradients:
    """Each label's g_s at one version, asked of the port once (trusted-score, label-check and foolsgold each
    keep one), and their mix by a device's label counts."""

    def __init__(self) -> None:
        self.version, self.cache = -1, {}
        self.stack: LabelStack | None = None

    def at(self, version: int) -> None:
        """Forget what was asked at another version."""
        if self.version != version:
            self.version, self.cache, self.stack = version, {}, None

    def of(self, reference: ReferenceGradient | None, version: int, label: int) -> np.ndarray | None:
        self.at(version)
        if label not in self.cache:
            self.cache[label] = None if reference is None else reference.gradient(label)
        return self.cache[label]

    def stacked(self, reference: ReferenceGradient | None, version: int, classes: int) -> LabelStack | None:
        """Every one of ``classes`` labels' g_s stacked (``LabelStack``), built once a version; None when no
        label has a trusted sample."""
        self.at(version)
        if self.stack is None:
            rows = [(label, self.of(reference, version, label)) for label in range(classes)]
            kept = [(label, g) for label, g in rows if g is not None]
            if not kept:
                return None
            matrix = np.stack([g.astype(np.float64).ravel() for _, g in kept])
            labels = np.array([label for label, _ in kept])
            self.stack = LabelStack(labels, matrix, np.linalg.norm(matrix, axis=1))
        return self.stack

    def mixed(
        self, reference: ReferenceGradient | None, version: int, counts: np.ndarray
    ) -> np.ndarray | None:
        """Σ_c p_c g_s(c): g_s on the trusted samples of each label the device trained on, weighted by its
        share of the device's batch (labels without a trusted sample left out); None when none has one."""
        mixed, weight = None, 0.0
        for label in np.flatnonzero(counts > 0):
            gradient = self.of(reference, version, int(label))
            if gradient is not None:
                share = float(counts[label])
                mixed = gradient * share if mixed is None else mixed + gradient * share
                weight += share
        return None if mixed is None else mixed / np.float32(weight)


def label_cosines(gradient: np.ndarray, stack: LabelStack) -> np.ndarray | None:
    """The push's cosine with each stacked label's g_s (a row of ``stack`` each; 0 where either is zero),
    None when the push is not of the stack's shape."""
    if stack.matrix.shape[1] != gradient.size:
        return None
    g = gradient.astype(np.float64).ravel()
    norms = stack.norms * float(np.linalg.norm(g))
    return np.divide(stack.matrix @ g, norms, out=np.zeros(len(norms)), where=norms > 0)


def lowest_label_score(
    gradient: np.ndarray, stack: LabelStack | None, head: tuple[slice, slice] | None, *, mass: bool = False
) -> float | None:
    """The lowest over the labels of the push's cosine with that label's g_s (``stack``), with ``mass``
    times the push's bias gradient there when positive; None without a softmax head or any label's g_s."""
    scores = None if head is None or stack is None else label_cosines(gradient, stack)
    if scores is None:
        return None
    if mass:  # ∂b_k = mean p_k − freq_k: over 0, the model takes the batch for k more than it says
        scores *= np.maximum(gradient[head[1]].astype(np.float64)[stack.labels], 0.0)
    return float(scores.min())
