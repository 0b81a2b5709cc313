"""AUDP (Li et al., "Asynchronous FL with DP for Edge Intelligence", §5; docs seed-algorithms.md §2): every
device adds norm-Laplace noise to a fixed-clip gradient; the server applies one gradient per update, FIFO,
at Table 2's rate γ_t⁻¹ = L(τ_max+1) + sqrt(Δ_b+1)·sqrt(t), Δ_b = σ²/b + E‖η‖².

Decisions (shared with MAPA, which extends this class):
* The grant's DP terms come from here (``terms_for(...).extra["dp"]``, mechanism ``clip-normlaplace/1``):
  b = ``dp_step_batch`` distinct examples, each clipped to G (per-example clipping, so ΔS = 2G/b exactly),
  averaged, noise scale λ = ΔS/ε. ε_k = ``dp_step_epsilon`` is one setting for every device (the paper lets
  each device send its own; Fleet's devices do not choose their privacy level).
* Δ_b uses the variance of the sampler the devices actually run (``dp_noise_sampler``): d(d+1)λ² for the
  exact one (d learnt from the parameters at the first step), 2λ² for the paper's variance-matched one.
* τ_max is enforced at arrival: a gradient with τ > τ_max is dropped (weight 0, counted in ``dropped``);
  it was charged at grant, so the device's ε stays an upper bound. ``admit`` cannot know τ in advance.
* L2 regularisation (λ_reg) is applied by the server as weight decay: post-processing of the noised
  gradient, so it costs no privacy (the clip then bounds the data term only).
* ``learning_rate``, when set, replaces the formula by a constant (experiments); None keeps Table 2's.
* k = 1 by default (the paper's one gradient per update, FIFO: arrivals are applied in the order they come);
  a larger k or a time window applies the buffer's mean as one step (an extension, not the paper's).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from fleet_protocol.accounting import NORM_LAPLACE, norm_laplace_second_moment
from server.strategies.base import Arrival, Buffered, Strategy, StrategySettings, TaskTerms


class NormLaplaceSettings(StrategySettings):
    """What AUDP and MAPA share: the per-step ε, the batch, the noise sampler and the rate's constants."""

    dp_step_epsilon: float = Field(
        0.1, gt=0, allow_inf_nan=False, description="ε_k of every step, one for all devices (pure ε-DP)"
    )
    dp_step_batch: int = Field(12, ge=1, description="b: examples per step, each clipped to G = b·ΔS/2")
    dp_noise_sampler: Literal["exact", "paper"] = Field(
        "exact", description="norm-Laplace sampler; 'paper' matches the paper's variance and is NOT ε-DP"
    )
    tau_max: int = Field(10, ge=0, description="gradients staler than this are dropped; enters the rates")
    smoothness: float = Field(10.0, gt=0, description="L, the loss's smoothness (assumed)")
    gradient_std: float = Field(30.0, ge=0, description="σ of a per-example gradient (assumed)")
    l2: float = Field(0.0, ge=0, description="λ_reg, applied by the server as weight decay")


class AUDPSettings(NormLaplaceSettings):
    name: Literal["audp"] = "audp"
    audp_clip: float = Field(3.0, gt=0, allow_inf_nan=False, description="G, the fixed per-example clip")


class AUDP(Strategy):
    name = "audp"
    needs_dp = (
        "its grants carry norm-Laplace DP terms that the privacy ledger completes (sampling rate, budget):"
        " without DP no device can run them"
    )
    average = True  # k > 1 (not the paper's) applies the mean of k noised gradients as one step
    settings = AUDPSettings

    def __init__(
        self,
        *,
        learning_rate: float | None = None,
        k: int = 1,
        time_window: float | None = None,
        dp_step_epsilon: float = 0.1,
        dp_step_batch: int = 12,
        dp_noise_sampler: str = "exact",
        tau_max: int = 10,
        smoothness: float = 10.0,
        gradient_std: float = 30.0,
        l2: float = 0.0,
        audp_clip: float = 3.0,
    ) -> None:
        if dp_noise_sampler not in ("exact", "paper"):
            raise ValueError(f"dp_noise_sampler must be 'exact' or 'paper', got {dp_noise_sampler!r}")
        for label, value in (("dp_step_epsilon", dp_step_epsilon), ("smoothness", smoothness)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be positive and finite, got {value}")
        if dp_step_batch < 1 or tau_max < 0 or gradient_std < 0 or l2 < 0:
            raise ValueError("dp_step_batch >= 1, tau_max >= 0, gradient_std >= 0 and l2 >= 0 are required")
        super().__init__(learning_rate=learning_rate or 0.0, k=k, time_window=time_window)
        self.fixed_rate = learning_rate
        self.epsilon, self.batch, self.sampler = dp_step_epsilon, dp_step_batch, dp_noise_sampler
        self.tau_max, self.smoothness, self.gradient_std, self.l2 = tau_max, smoothness, gradient_std, l2
        self.sensitivity = 2.0 * audp_clip / dp_step_batch  # ΔS = 2G/b (Theorem 1)
        self.num_params: int | None = None  # d, learnt at the first step
        self.dropped = 0

    # -- the device's terms ---------------------------------------------------------------------
    @property
    def clip(self) -> float:
        """G = b·ΔS/2: each example's gradient bound for the current sensitivity."""
        return self.batch * self.sensitivity / 2.0

    def dp_terms(self) -> dict[str, Any]:
        """The mechanism's terms for a grant (the coordinator adds N-dependent fields and charges it)."""
        scale = self.sensitivity / self.epsilon
        return {
            "mechanism": NORM_LAPLACE,
            "clip": self.clip,
            "noise_multiplier": scale / self.clip,
            "expected_batch": self.batch,
            "epsilon_step": self.epsilon,
            "sensitivity": self.sensitivity,
            "noise": self.sampler,
        }

    def terms_for(self, *, device_id: str, label_counts: np.ndarray | None) -> TaskTerms:
        return TaskTerms(extra={"dp": self.dp_terms()})

    def delta_b(self, d: int | None = None) -> float:
        """Δ_b = σ²/b + E‖η‖² at the current ΔS (the exact sampler's variance needs d)."""
        d = d if d is not None else self.num_params
        if d is None:
            raise ValueError("d is unknown until the first step")
        noise = norm_laplace_second_moment(d, self.sensitivity / self.epsilon, self.sampler)
        return self.gradient_std**2 / self.batch + noise

    # -- arrivals and steps -----------------------------------------------------------------------
    def weigh(self, arrival: Arrival) -> float:
        return 1.0

    def receive(self, arrival: Arrival) -> float:
        if arrival.staleness > self.tau_max:
            self.dropped += 1
            return 0.0
        self.buffer.append(Buffered(arrival.task_id, 1.0, arrival.gradient, arrival.received_at))
        return 1.0

    def rate(self, t: int) -> float:
        """γ_t (Table 2): 1 / (L(τ_max+1) + sqrt(Δ_b+1)·sqrt(t)), t = 1, 2, ..."""
        if self.fixed_rate is not None:
            return self.fixed_rate
        return 1.0 / (self.smoothness * (self.tau_max + 1) + math.sqrt(self.delta_b() + 1) * math.sqrt(t))

    def apply(self, params: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """x − γ_t(g̃ + λ_reg·x); ``updates`` already counts this step (t is 1-based)."""
        self.num_params = int(params.size)
        self.learning_rate = self.rate(self.updates)
        step = direction + np.float32(self.l2) * params if self.l2 else direction
        return params - np.float32(self.learning_rate) * step

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "sensitivity": self.sensitivity,
            "clip": self.clip,
            "epsilon_step": self.epsilon,
            "tau_max": self.tau_max,
            "dropped": self.dropped,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "sensitivity": self.sensitivity,
            "num_params": self.num_params,
            "dropped": self.dropped,
            "learning_rate": self.learning_rate,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.num_params = state.get("num_params")
        self.dropped = int(state.get("dropped", 0))
        self.learning_rate = float(state.get("learning_rate", self.learning_rate))
        self._load_sensitivity(state)

    def _load_sensitivity(self, state: dict[str, Any]) -> None:
        """AUDP's ΔS is a setting (a changed clip wins over the stored one); MAPA's is state."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, batch={self.batch},"
            f" sensitivity={self.sensitivity}, tau_max={self.tau_max}, sampler={self.sampler!r})"
        )
