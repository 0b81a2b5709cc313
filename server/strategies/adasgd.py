"""AdaSGD (FLeet thesis §3.2.3): exponential staleness dampening plus a label-similarity boost.

    w_i = min(1, Λ(τ_i) / max(boost_floor, sim_i)),   Λ(τ) = exp(−β·min(τ, τ_thres))

τ_thres is the ``percentile`` of past staleness values and β makes Λ cross DynSGD's 1/(τ+1) at
τ_thres/2. Until ``bootstrap`` staleness values were seen, Λ is DynSGD's 1/(τ+1). sim_i is the
Bhattacharyya coefficient between the gradient's mini-batch labels and the global label distribution
(all samples used so far, or — ``global_counts="weighted"`` — each counted with its applied weight).

Standing (issue 19): kept as the thesis's strategy, no longer the default. On 2-label non-IID batches
the boost lifts almost every gradient alike (x2, docs/results/adasgd-why.md) and exp dampening favours
the fastest devices' gradients, so its best rate is 2-4x below DynSGD's and it diverges at 4x its best
(docs/results/default-search.md). On the real peer workload, at its best rate, it took 20.2 and 22.3 s to
90% in two runs, against 9.7 and 12.9 s for the default, DynSGDClip, untuned (docs/results/peer-flower.md).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Arrival, Strategy, StrategySettings, TaskTerms
from server.strategies.dampening import adasgd_beta, exp_dampening, inverse_dampening
from server.strategies.similarity import bhattacharyya


class AdaSGDSettings(StrategySettings):
    name: Literal["adasgd"] = "adasgd"
    percentile: float = Field(99.7, gt=0, le=100, description="τ_thres is this percentile of past staleness")
    bootstrap: int = Field(
        100, ge=0, description="staleness values seen before τ_thres is used (DynSGD till then)"
    )
    staleness_cap: bool = Field(True, description="cap τ at τ_thres in the dampening")
    boost_floor: float = Field(0.1, gt=0, le=1, description="the similarity boost divides by at least this")
    boost_scope: Literal["all", "stragglers", "none"] = Field(
        "all", description="which gradients the similarity boost lifts"
    )
    global_counts: Literal["samples", "weighted"] = Field(
        "samples", description="the global label distribution: all samples, or each counted with its weight"
    )


def linear_percentile(ordered: list[int], percentile: float) -> float:
    """``np.percentile(ordered, percentile)`` (method "linear") of a sorted, non-empty list, bit for bit:
    the same float64 operations as numpy's ``_quantile`` and ``_lerp``, without building an array."""
    n = len(ordered)
    virtual = (n - 1) * (percentile / 100)
    if virtual >= n - 1:
        return float(ordered[-1])
    if virtual < 0:
        return float(ordered[0])
    below = math.floor(virtual)
    gamma = virtual - below
    a, b = float(ordered[below]), float(ordered[below + 1])
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


class AdaSGD(Strategy):
    name = "adasgd"
    settings = AdaSGDSettings

    def __init__(
        self,
        *,
        learning_rate: float = 0.05,
        k: int = 1,
        time_window: float | None = None,
        percentile: float = 99.7,
        bootstrap: int = 100,
        window: int = 1000,
        tau_thres: float | None = None,
        staleness_cap: bool = True,
        boost_floor: float = 0.1,
        boost_scope: Literal["all", "stragglers", "none"] = "all",
        global_counts: Literal["samples", "weighted"] = "samples",
    ) -> None:
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)
        self.percentile = percentile
        self.bootstrap = bootstrap
        self.window = window
        self.tau_thres = tau_thres
        self.staleness_cap = staleness_cap
        self.boost_floor = boost_floor
        self.boost_scope = boost_scope
        self.global_counts = global_counts
        self.staleness_seen: deque[int] = deque(maxlen=window)
        self.label_totals: np.ndarray | None = None
        self._thres_known = False  # the percentile is cached until the next staleness value arrives
        self._thres: float | None = None
        # staleness_seen in sorted order, kept up to date by weigh (a percentile is then two lookups)
        self._sorted: list[int] | None = None
        self._sorted_for: deque[int] | None = None

    # -- statistics ----------------------------------------------------------------------------
    def current_tau_thres(self) -> float | None:
        """The fixed τ_thres, or the percentile of past staleness; None while bootstrapping."""
        if self.tau_thres is not None:
            return float(self.tau_thres)
        if not self._thres_known:
            self._thres = (
                None
                if len(self.staleness_seen) < self.bootstrap
                else max(1.0, linear_percentile(self._sorted_window(), self.percentile))
            )
            self._thres_known = True
        return self._thres

    def _sorted_window(self) -> list[int]:
        if self._sorted is None or self._sorted_for is not self.staleness_seen:
            self._sorted, self._sorted_for = sorted(self.staleness_seen), self.staleness_seen
        return self._sorted

    def dampening(self, tau: int) -> float:
        """Λ(τ): DynSGD while bootstrapping, then exp(−β·τ) (τ capped at τ_thres if ``staleness_cap``)."""
        thres = self.current_tau_thres()
        if thres is None:
            return inverse_dampening(tau)
        effective = min(tau, thres) if self.staleness_cap else tau
        return exp_dampening(effective, adasgd_beta(thres))

    def similarity(self, label_counts: np.ndarray | None) -> float | None:
        """BC between these labels and the global distribution; None before any gradient arrived, or
        without labels (a DP device sends none)."""
        if label_counts is None or self.label_totals is None or self.label_totals.sum() <= 0:
            return None
        return bhattacharyya(label_counts, self.label_totals)

    # -- hooks ---------------------------------------------------------------------------------
    def reads(self) -> frozenset[str]:
        """The label counts, for the similarity boost; none with ``boost_scope="none"`` (the dampening
        alone, the mode that runs with DP on: the grants' similarity is then None too)."""
        return frozenset({"label_counts"}) if self.boost_scope != "none" else frozenset()

    def terms_for(self, *, device_id: str, label_counts: np.ndarray | None) -> TaskTerms:
        return TaskTerms(similarity=self.similarity(label_counts))

    def weigh(self, arrival: Arrival) -> float:
        tau = arrival.staleness
        damp = self.dampening(tau)
        weight = damp
        sim = self.similarity(arrival.label_counts)
        thres = self.current_tau_thres()
        boosted = self.boost_scope == "all" or (
            self.boost_scope == "stragglers" and thres is not None and tau > 1.5 * thres
        )
        if boosted and sim is not None:
            weight = damp / max(self.boost_floor, sim)
        weight = min(1.0, weight)
        seen, ordered = self.staleness_seen, self._sorted
        in_step = ordered is not None and self._sorted_for is seen and len(ordered) == len(seen)
        if in_step and len(seen) == seen.maxlen:  # the oldest value leaves the window
            del ordered[bisect.bisect_left(ordered, seen[0])]
        seen.append(int(tau))
        if in_step:
            bisect.insort(ordered, int(tau))
        else:
            self._sorted = None
        self._thres_known = False
        self._count_labels(arrival.label_counts, weight)
        return weight

    def _count_labels(self, counts: np.ndarray | None, weight: float) -> None:
        if counts is None:  # a DP push sends no labels
            return
        counts = np.asarray(counts, dtype=np.float64)
        if self.label_totals is None:
            self.label_totals = np.zeros_like(counts)
        self.label_totals += counts * (weight if self.global_counts == "weighted" else 1.0)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "tau_thres": self.current_tau_thres(), "boost_scope": self.boost_scope}

    # -- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "staleness_seen": list(self.staleness_seen),
            "label_totals": None if self.label_totals is None else self.label_totals.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.staleness_seen = deque((int(t) for t in state.get("staleness_seen", [])), maxlen=self.window)
        self._thres_known = False
        totals = state.get("label_totals")
        self.label_totals = None if totals is None else np.asarray(totals, dtype=np.float64)

    def __repr__(self) -> str:
        return (
            f"AdaSGD(learning_rate={self.learning_rate}, k={self.k}, percentile={self.percentile}, "
            f"staleness_cap={self.staleness_cap}, boost_floor={self.boost_floor}, "
            f"boost_scope={self.boost_scope!r}, global_counts={self.global_counts!r})"
        )
