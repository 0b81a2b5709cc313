"""MAPA (Li et al., §6; docs seed-algorithms.md §3): AUDP in stages. Each stage runs a constant rate for T_s
updates, long enough that the expected gradient norm falls below the next stage's clip; then ΔS ← θ·ΔS, so
the clip G = bΔS/2 and the noise λ = ΔS/ε shrink together without hand-tuning the bound.

Per stage (Eqs. 15-16, Table 2): P = max(8Δ_b / ((τ_max+1)·b²·ΔS²·θ²), 1), γ = 1 / (2PL(τ_max+1)),
T_s = 4P²L(τ_max+1)²·(f(x₁) − f*) / Δ_b, with Δ_b = σ²/b + E‖η‖² of the sampler in use.

Decisions on the spec's open points (seed-algorithms.md §3.7), besides AUDP's (audp.py):
1. Noise sampler: "exact" (radius ~ Gamma(d, ΔS/ε), the ε-DP one) is the default; "paper" (radius ~
   Exp(ΔS/ε), E‖η‖² = 2ΔS²/ε², the variance the paper's Δ_b assumes) reproduces the curves and is NOT
   ε-DP. Δ_b always uses the variance of the sampler in use, so with "exact" the stages are far longer.
2. Clipping: per example, to G = bΔS/2 (device side); the mean then has sensitivity ΔS as Remark 4 claims.
3. f(x₁) − f* is a hyperparameter (``mapa_loss_gap``, default ln 10 ≈ 2.30: a 10-class cross-entropy at
   uniform predictions minus the lower bound 0); T_s is rounded up and clamped to at least 1.
4. Stage rule: Alg. 1's ΔS ← θΔS (not Table 2's 2·sqrt(Δ_s/b)); when P is clamped at 1 the proven norm
   bound is already below bθΔS/2, so θΔS is kept rather than shrinking further.
5. ΔS₀: ``mapa_sensitivity`` if set, else Theorem 3's smallest admissible 2σ / (b·sqrt(1 − sqrt(1 − δ))).
6. τ_max: gradients with τ > τ_max are dropped at arrival (as AUDP). ε_k: one setting for every device, so
   ε₀ = min_k ε_k is that setting.
A gradient computed under the previous stage's terms and arriving after the switch is applied at the new
stage's rate: it was noised and charged under its own terms, so privacy is unaffected.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.audp import AUDP, NormLaplaceSettings


def initial_sensitivity(gradient_std: float, batch: int, delta: float) -> float:
    """Theorem 3: the smallest ΔS with (1 − 4σ²/(b²ΔS²))² ≥ 1 − δ."""
    return 2.0 * gradient_std / (batch * math.sqrt(1.0 - math.sqrt(1.0 - delta)))


class MAPASettings(NormLaplaceSettings):
    name: Literal["mapa"] = "mapa"
    mapa_sensitivity: float | None = Field(None, gt=0, description="ΔS₀; unset: Theorem 3's from σ, b and δ")
    mapa_theta: float = Field(0.5, gt=0, lt=1, description="θ: ΔS ← θ·ΔS at each new stage")
    mapa_delta: float = Field(1e-3, gt=0, lt=1, description="δ, Theorem 3's failure probability for ΔS₀")
    mapa_loss_gap: float = Field(
        2.302585, gt=0, description="f(x₁) − f*, unknown: a hyperparameter (ln 10, a 10-class cross-entropy)"
    )


class MAPA(AUDP):
    name = "mapa"  # type: ignore[assignment]
    settings = MAPASettings  # type: ignore[assignment]

    def __init__(
        self,
        *,
        mapa_sensitivity: float | None = None,
        mapa_theta: float = 0.5,
        mapa_delta: float = 1e-3,
        mapa_loss_gap: float = math.log(10),
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if not 0 < mapa_theta < 1 or not 0 < mapa_delta < 1 or not mapa_loss_gap > 0:
            raise ValueError("mapa_theta and mapa_delta must be in (0, 1) and mapa_loss_gap > 0")
        self.theta, self.delta, self.loss_gap = mapa_theta, mapa_delta, mapa_loss_gap
        self.initial = mapa_sensitivity or initial_sensitivity(self.gradient_std, self.batch, mapa_delta)
        self.sensitivity = self.initial
        self.stage = 0
        self.stage_step = 0  # updates applied in this stage (t_s − 1)

    def stage_figures(self, d: int | None = None) -> tuple[float, float, int]:
        """(P, γ, T_s) of the current stage."""
        tau1, b, L = self.tau_max + 1, self.batch, self.smoothness
        delta_b = self.delta_b(d)
        p = max(8.0 * delta_b / (tau1 * b**2 * self.sensitivity**2 * self.theta**2), 1.0)
        gamma = 1.0 / (2.0 * p * L * tau1)
        length = 4.0 * p**2 * L * tau1**2 * self.loss_gap / delta_b
        return p, gamma, max(1, math.ceil(min(length, 1e15)))

    def rate(self, t: int) -> float:
        return self.fixed_rate if self.fixed_rate is not None else self.stage_figures()[1]

    def apply(self, params: np.ndarray, direction: np.ndarray) -> np.ndarray:
        new = super().apply(params, direction)
        self.stage_step += 1
        if self.stage_step >= self.stage_figures()[2]:
            self.sensitivity *= self.theta
            self.stage += 1
            self.stage_step = 0
        return new

    def describe(self) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        if self.num_params is not None:
            p, gamma, length = self.stage_figures()
            figures = {"stage_p": p, "stage_rate": gamma, "stage_length": length}
        return {**super().describe(), "stage": self.stage, "stage_step": self.stage_step, **figures}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "stage": self.stage, "stage_step": self.stage_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.stage = int(state.get("stage", 0))
        self.stage_step = int(state.get("stage_step", 0))

    def _load_sensitivity(self, state: dict[str, Any]) -> None:
        self.sensitivity = float(state.get("sensitivity", self.initial))
