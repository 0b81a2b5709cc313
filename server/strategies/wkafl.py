"""WKAFL (Zhou et al., two-stage weighted K-asynchronous FL; docs seed-algorithms.md §6): keep the stale
gradients whose direction agrees with an estimate of the true gradient, so non-IID devices still count.

At each step, over the first K arrivals (server/strategies/kasync.py), iteration j:
g̃_i = g_i + α·m (m: the previous estimate), ĝ_i = clip(g̃_i, CB), ḡ = Σ a_i ĝ_i / Σ a_i with a_i = (e/2)^−τ_i,
sim_i = cos(ĝ_i, ḡ), p'_i = exp(β·sim_i) if sim_i ≥ sim_min else 0; in stage 2 ĝ_i = clip(ĝ_i, B·‖ḡ‖);
g = Σ p'_i ĝ_i / Σ p'; w ← w − η0/(γ·τ_min + 1) · g.

Decisions on §6.6:
* Stage switch (1): stage 2 once the *mean* loss of the K devices (the text; Alg. 2's sum is the same test
  at ε·K) is ≤ ``wkafl_loss_threshold``, or once ``wkafl_switch_update`` updates were applied (the authors'
  code), whichever comes first; either may be off (threshold 0 or None, update count None). The switch is
  sticky and takes effect in the step that triggers it. A loss that is not finite never triggers it.
* Momentum (2): ``wkafl_momentum`` "estimate" (default, the paper: m = the previous ḡ) or "aggregate" (the
  code and the convergence analysis: m = the previous applied g). It starts at 0 and lives in the state.
* Selection (3): p' = exp(β·sim) alone (the paper), not multiplied by the staleness weight (the code);
  computed as exp(β·(sim − max sim)), the same p after normalising. sim = 0 for a zero vector. The stage-2
  clip is applied after the similarities are taken (cosine is scale-invariant, so the order is moot).
* Nothing consistent (4): if no gradient reaches sim_min, the estimate ḡ is applied (the code), not skipped.
* Privacy (5): WKAFL reads each device's plaintext loss for the switch by loss, which a DP device does not
  send: with FLEET_DP the settings refuse it unless the switch is by update count only (threshold 0).
* Stability (6) and Alg. 4's D_min/D_max (9) are the experiment's (experiments/wkafl.py); (7, 8) concern the
  paper's tables only.
* Quorum (10): late gradients are reused, never dropped: every arrival enters the next step's K (kasync.py).
  A time window (FLEET_TIME_WINDOW) may fire a step with fewer than K; the rules are the same over them.
* Weights: the weight reported for an arrival is a_i (what is known when it lands); a wrapper's factor
  (e.g. Kardam's dampening) multiplies a_i in the estimate. τ_min is Fleet's staleness (0 = fresh).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Arrival, StrategySettings
from server.strategies.kasync import KAsync, staleness_weight

Momentum = Literal["estimate", "aggregate"]


class WKAFLSettings(StrategySettings):
    name: Literal["wkafl"] = "wkafl"
    wkafl_alpha: float = Field(
        0.1, ge=0, allow_inf_nan=False, description="α: the weight of the previous estimate added"
    )
    wkafl_beta: float = Field(10.0, ge=0, allow_inf_nan=False, description="β in p' = exp(β·cos)")
    wkafl_sim_min: float = Field(
        0.3, ge=-1, le=1, description="gradients less similar to the estimate than this are not applied"
    )
    wkafl_clip: float = Field(
        100.0, gt=0, allow_inf_nan=False, description="CB: every gradient clipped to this"
    )
    wkafl_stage2_clip: float = Field(
        10.0, gt=0, allow_inf_nan=False, description="B: stage 2 clips to B·‖estimate‖"
    )
    wkafl_gamma: float = Field(0.1, ge=0, allow_inf_nan=False, description="γ in η = η₀/(γ·τ_min + 1)")
    wkafl_loss_threshold: float = Field(
        0.3, ge=0, allow_inf_nan=False, description="ε: stage 2 once the mean loss is ≤ ε; 0: never by loss"
    )
    wkafl_switch_update: int | None = Field(
        None, ge=0, description="or stage 2 after this many updates (the authors' code)"
    )
    wkafl_momentum: Literal["estimate", "aggregate"] = Field(
        "estimate", description="momentum on the previous estimate ḡ (the paper) or the applied g (the code)"
    )


def norm(vector: np.ndarray) -> float:
    """‖v‖₂ by a plain sum (ndarray.dot, which np.linalg.norm uses, stalls on a busy BLAS thread pool)."""
    return math.sqrt(float(np.square(vector).sum()))


def clip_rows(rows: np.ndarray, bound: float) -> np.ndarray:
    """Each row scaled to norm ≤ bound (g · min(1, bound/‖g‖)); a bound of 0 zeroes every row."""
    norms = np.linalg.norm(rows, axis=1)
    scale = np.minimum(1.0, bound / np.where(norms > 0, norms, 1.0))
    return rows * scale[:, None]


def cosine(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """cos(row_i, vector) per row; 0 where either is the zero vector."""
    norms = np.linalg.norm(rows, axis=1) * norm(vector)
    return np.divide(rows @ vector, norms, out=np.zeros(len(rows)), where=norms > 0)


def selection(similarities: np.ndarray, beta: float, sim_min: float) -> np.ndarray:
    """Eqs. 7-8: p_i ∝ exp(β·sim_i) over the sim_i ≥ sim_min, 0 for the others; all 0 if none passes."""
    keep = similarities >= sim_min
    if not keep.any():
        return np.zeros(len(similarities))
    raw = np.where(keep, np.exp(beta * (similarities - similarities[keep].max())), 0.0)
    return raw / raw.sum()


def min_staleness_rate(rate0: float, gamma: float, staleness: list[int]) -> float:
    """Eq. 10: η_j = η0 / (γ·τ_min + 1)."""
    return rate0 / (gamma * max(0, min(staleness)) + 1.0)


class WKAFL(KAsync):
    name = "wkafl"
    settings = WKAFLSettings

    def __init__(
        self,
        *,
        learning_rate: float = 0.05,
        k: int = 10,
        time_window: float | None = None,
        wkafl_alpha: float = 0.1,
        wkafl_beta: float = 10.0,
        wkafl_sim_min: float = 0.3,
        wkafl_clip: float = 100.0,
        wkafl_stage2_clip: float = 10.0,
        wkafl_gamma: float = 0.1,
        wkafl_loss_threshold: float | None = 0.3,
        wkafl_switch_update: int | None = None,
        wkafl_momentum: str = "estimate",
    ) -> None:
        if wkafl_momentum not in ("estimate", "aggregate"):
            raise ValueError(f"wkafl_momentum must be 'estimate' or 'aggregate', got {wkafl_momentum!r}")
        if wkafl_alpha < 0 or wkafl_clip <= 0 or wkafl_stage2_clip <= 0 or wkafl_gamma < 0:
            raise ValueError("wkafl_alpha and wkafl_gamma must be >= 0, wkafl_clip and wkafl_stage2_clip > 0")
        if not -1 <= wkafl_sim_min <= 1:
            raise ValueError(f"wkafl_sim_min must be in [-1, 1], got {wkafl_sim_min}")
        super().__init__(learning_rate=learning_rate, k=k, time_window=time_window)
        self.alpha, self.beta, self.sim_min = wkafl_alpha, wkafl_beta, wkafl_sim_min
        self.clip, self.stage2_clip, self.gamma = wkafl_clip, wkafl_stage2_clip, wkafl_gamma
        self.loss_threshold, self.switch_update = wkafl_loss_threshold, wkafl_switch_update
        self.momentum: Momentum = "aggregate" if wkafl_momentum == "aggregate" else "estimate"
        self.stage = 1
        self.previous: np.ndarray | None = None  # m: the previous estimate ḡ (or applied g)
        self.last: dict[str, Any] = {}

    def reads(self) -> frozenset[str]:
        """The loss, for the stage switch; none with the switch by loss off (``wkafl_loss_threshold`` 0 or
        None: by update count only), the mode that runs with DP on."""
        return frozenset({"loss"}) if self.loss_threshold else frozenset()

    def weigh(self, arrival: Arrival) -> float:
        return staleness_weight(arrival.staleness)

    def switch(self, losses: list[float | None]) -> None:
        """Stage 2 (sticky) once the K devices' mean loss is ≤ ε or the update count is reached; a push
        without a loss (DP) never counts towards the switch by loss."""
        known = [loss for loss in losses if loss is not None]
        mean = float(np.mean(known)) if known and len(known) == len(losses) else math.inf
        by_loss = bool(self.loss_threshold) and math.isfinite(mean) and mean <= (self.loss_threshold or 0.0)
        by_count = self.switch_update is not None and self.updates >= self.switch_update
        if by_loss or by_count:
            self.stage = 2

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        """One WKAFL iteration over the buffer (Alg. 2 lines 8-17 with Alg. 3)."""
        if not self.buffer:
            return params.copy()
        rows = np.stack([b.gradient for b in self.buffer]).astype(np.float64)
        if self.previous is not None:
            rows += self.alpha * self.previous.astype(np.float64)
        self.switch([t.loss for t in self.tags])
        rows = clip_rows(rows, self.clip)
        estimate = self.normalised() @ rows
        similarities = cosine(rows, estimate)
        p = selection(similarities, self.beta, self.sim_min)
        if self.stage == 2:
            rows = clip_rows(rows, self.stage2_clip * norm(estimate))
        direction = p @ rows if p.any() else estimate
        staleness = [t.staleness for t in self.tags]
        rate = min_staleness_rate(self.learning_rate, self.gamma, staleness)
        self.previous = (estimate if self.momentum == "estimate" else direction).astype(np.float32)
        self.last = {
            "rate": rate,
            "selected": int(np.count_nonzero(p)),
            "tau_min": min(staleness),
            "tau_weighted": float(p @ np.array(staleness, dtype=np.float64)) if p.any() else None,
        }
        self.buffer.clear()
        self.tags.clear()
        self.updates += 1
        return self.capped(params, params - np.float32(rate) * direction.astype(np.float32))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "stage": self.stage, **{f"last_{k}": v for k, v in self.last.items()}}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "stage": self.stage, "momentum_vector": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.stage = int(state.get("stage", 1))
        vector = state.get("momentum_vector")
        self.previous = None if vector is None else np.asarray(vector, dtype=np.float32)

    def __repr__(self) -> str:
        return (
            f"WKAFL(learning_rate={self.learning_rate}, k={self.k}, alpha={self.alpha}, beta={self.beta},"
            f" sim_min={self.sim_min}, clip={self.clip}, B={self.stage2_clip}, gamma={self.gamma},"
            f" loss_threshold={self.loss_threshold}, switch_update={self.switch_update},"
            f" momentum={self.momentum!r})"
        )
