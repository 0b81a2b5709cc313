"""``FoolsGold``: colluding devices pull the same way, push after push; honest non-IID devices do not (issue
30's defence against a shared backdoor, after Fung, Yoon, Beschastnikh 2020, "The Limitations of Federated
Learning in Sybil Settings", RAID).

A backdoor needs its attackers to agree: every one of them trains the same trigger to the same label, so
their gradients share a component that no honest device's has. FoolsGold keeps each device's history (the
sum of its pushes) and weighs a device down by how close its history is to another's: with v_i the largest
cosine of device i's history with any other's, the cosines are pardoned (cs_ij · v_i / v_j when v_j > v_i,
so an honest device that happens to look like a sybil is not punished as much as the sybil), α_i = 1 − max_j
cs_ij, α rescaled so the most independent device has 1, and a logit, κ(ln(α / (1 − α)) + ½) clipped to
[0, 1], puts near-duplicates at 0. A push is scaled by its device's weight; weight 0 withholds it.

Two options of ours, for asynchronous pushes of 100k-parameter models from up to thousands of devices:
- **a sketch**: histories are kept as ``sketch``-dimensional count sketches of the pushes (a fixed random
  bucket and sign per parameter), which preserve inner products in expectation, so a thousand devices cost
  a few MB and a push O(d + n·sketch);
- **``center="labels"``**: with label-sorted shards, two honest devices holding the same digits push alike.
  Each push first has the trusted gradient of the labels the device has trained on (unit length, the
  ``trusted-score`` entry's port) taken out of its unit direction, so what is left is what the device's data
  adds to its labels' clean gradient: noise for honest devices, the trigger for a backdoor's.

Histories are not kept in the state: after a restart they start again. ``foolsgold_weights`` describes the
current weights' spread; ``foolsgold_dropped`` counts pushes withheld at weight 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.core.ports import ReferenceGradient
from server.strategies.base import Arrival, Strategy
from server.strategies.by_label import LabelGradients
from server.strategies.trusted_score import device_counts, head_start
from server.strategies.wrappers import StrategyWrapper, WrapperSettings


class FoolsGoldSettings(WrapperSettings):
    name: Literal["foolsgold"] = "foolsgold"
    sketch: int = Field(
        4096, ge=16, le=1_000_000, description="histories as count sketches of this many values"
    )
    layers: Literal["all", "body", "head"] = Field(
        "all", description="the parameters a history sums: all, those under the output layer, or that layer"
    )
    center: Literal["none", "fleet", "labels"] = Field(
        "fleet",
        description="compare histories less their mean over the devices, or with the trusted gradient of"
        " each device's labels taken out of its pushes (reads labels), or as they are",
    )
    confidence: float = Field(1.0, gt=0, le=100, description="the logit's κ: how sharply similarity costs")
    warm_up: int = Field(
        3, ge=1, le=10_000, description="a device's pushes before its history is compared (full weight until)"
    )


class FoolsGold(StrategyWrapper):
    settings = FoolsGoldSettings
    uses_reference = True  # given the trusted gradient port when there is one (layer split, label centring)

    @classmethod
    def needs_reference(cls, config: WrapperSettings) -> bool:
        return getattr(config, "layers", "all") != "all" or getattr(config, "center", "none") == "labels"

    def __init__(
        self,
        inner: Strategy,
        *,
        sketch: int = 4096,
        layers: Literal["all", "body", "head"] = "all",
        center: Literal["none", "fleet", "labels"] = "fleet",
        confidence: float = 1.0,
        warm_up: int = 3,
        reference: ReferenceGradient | None = None,
    ) -> None:
        super().__init__(inner)
        self.size, self.layers, self.center = sketch, layers, center
        self.confidence, self.warm_up, self.reference = confidence, warm_up, reference
        self.rows: dict[str, int] = {}  # device → its row in ``histories``
        self.histories = np.zeros((0, sketch))
        self.units = np.zeros((0, sketch))  # each history at unit length (a zero one stays zero)
        self.gram = np.zeros((0, 0))  # units @ units.T, a push changing one row and column
        self.counts = np.zeros(0, dtype=np.int64)
        self.labels_seen: dict[str, np.ndarray] = {}
        self.by_label = LabelGradients()
        self.hashed: tuple[int, np.ndarray, np.ndarray] | None = None  # (parameters, bucket, sign)
        self.received = self.dropped = 0
        self.last_weight: float | None = None

    def reads(self) -> frozenset[str]:
        return (frozenset({"label_counts"}) if self.center == "labels" else frozenset()) | self.inner.reads()

    def part(self, size: int) -> slice:
        """The slice of a flat gradient the histories sum."""
        head = None if self.layers == "all" or self.reference is None else self.reference.head()
        if head is None:
            return slice(0, size)
        start = head_start(head)
        if start == 0:  # the output layer is the whole model: there is no body
            return slice(0, size)
        return slice(0, start) if self.layers == "body" else slice(start, size)

    def sketched(self, vector: np.ndarray) -> np.ndarray:
        """The count sketch of ``vector``: Σ over the parameters hashed to each bucket of sign × value."""
        if self.hashed is None or self.hashed[0] != vector.size:
            rng = np.random.default_rng(20200101)  # fixed: every history uses the same hashing
            self.hashed = (
                vector.size,
                rng.integers(0, self.size, vector.size),
                rng.choice((-1.0, 1.0), vector.size),
            )
        _, bucket, sign = self.hashed
        return np.bincount(bucket, weights=vector.astype(np.float64) * sign, minlength=self.size)

    def direction(self, arrival: Arrival) -> np.ndarray | None:
        """The push's unit direction on the chosen part, its labels' trusted direction taken out."""
        gradient = arrival.gradient.astype(np.float64)
        norm = float(np.linalg.norm(gradient))
        if norm == 0.0 or not np.isfinite(norm):
            return None
        unit = gradient / norm
        if self.center == "labels" and arrival.label_counts is not None:
            counts = device_counts(
                self.labels_seen, arrival.device_id, np.asarray(arrival.label_counts, dtype=np.float64)
            )
            trusted = self.by_label.mixed(self.reference, arrival.base_version + arrival.staleness, counts)
            if trusted is not None and trusted.shape == unit.shape:
                scale = float(np.linalg.norm(trusted))
                if scale > 0:
                    unit = unit - trusted / scale
        return unit[self.part(unit.size)]

    def remember(self, device: str, vector: np.ndarray) -> int:
        """Adds the push's sketch to the device's history; its row."""
        row = self.rows.get(device)
        if row is None:
            row = self.rows[device] = len(self.rows)
            self.histories = np.vstack([self.histories, np.zeros((1, self.size))])
            self.units = np.vstack([self.units, np.zeros((1, self.size))])
            self.gram = np.pad(self.gram, ((0, 1), (0, 1)))
            self.counts = np.append(self.counts, 0)
        self.histories[row] += self.sketched(vector)
        self.counts[row] += 1
        self.units[row] = self.units_of(self.histories[row : row + 1])[0]
        self.gram[row] = self.gram[:, row] = self.units @ self.units[row]
        return row

    @staticmethod
    def units_of(rows: np.ndarray) -> np.ndarray:
        """Each row at unit length (a zero row stays zero)."""
        norms = np.linalg.norm(rows, axis=1)
        return rows / np.where(norms > 0, norms, 1.0)[:, None]

    def cosines(self, compared: np.ndarray) -> np.ndarray:
        """The pairwise cosines of the compared histories, from the Gram matrix of their unit rows: O(n²) a
        push, where the rows themselves would cost O(n² · sketch). With ``center`` "fleet" the unit rows less
        their mean: what every device pushes (the descent itself) is no sign of collusion."""
        gram = self.gram[np.ix_(compared, compared)]
        if self.center == "fleet":  # (u_i − ū)·(u_j − ū) = G_ij − r_i − r_j + mean(r), r = G's row means
            means = gram.mean(axis=1)
            gram = gram - means[:, None] - means[None, :] + means.mean()
        norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
        safe = np.where(norms > 1e-12, norms, np.inf)  # a zero row: cosine 0 with every other
        return gram / safe[:, None] / safe[None, :]

    def weights(self) -> np.ndarray:
        """FoolsGold's weight of every device from the pairwise cosines of the histories compared."""
        n = len(self.counts)
        compared = self.counts >= self.warm_up
        weight = np.ones(n)
        if compared.sum() < 2:
            return weight
        cs = self.cosines(np.flatnonzero(compared))
        np.fill_diagonal(cs, -np.inf)
        v = cs.max(axis=1)
        pardon = np.where(
            v[None, :] > v[:, None], v[:, None] / np.where(v[None, :] > 0, v[None, :], 1.0), 1.0
        )
        cs = cs * np.where(v[:, None] > 0, pardon, 1.0)
        alpha = np.clip(1.0 - cs.max(axis=1), 0.0, 1.0)
        top = alpha.max()
        alpha = alpha / top if top > 0 else np.zeros_like(alpha)
        alpha = np.minimum(alpha, 0.99)
        with np.errstate(divide="ignore"):
            logit = self.confidence * (np.log(alpha / (1.0 - alpha)) + 0.5)
        weight[compared] = np.clip(logit, 0.0, 1.0)
        return weight

    def receive(self, arrival: Arrival) -> float:
        self.received += 1
        vector = self.direction(arrival)
        if vector is None:
            return self.inner.receive(arrival)
        row = self.remember(arrival.device_id, vector)
        weight = float(self.weights()[row])
        self.last_weight = weight
        if weight <= 0.0:
            self.dropped += 1
            self.inner.withheld(arrival)
            return 0.0
        if weight >= 1.0:
            return self.inner.receive(arrival)
        return self.inner.receive(
            dataclasses.replace(arrival, gradient=arrival.gradient * np.float32(weight))
        )

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "foolsgold_received": self.received,
            "foolsgold_dropped": self.dropped,
            "foolsgold_last_weight": self.last_weight,
        }
