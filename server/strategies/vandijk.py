"""Van Dijk et al., "Asynchronous FL with reduced number of rounds and with DP from less aggregated Gaussian
noise" (docs seed-algorithms.md §5): each device runs rounds of local SGD of growing size s_i and pushes the
round's sum U of clipped, noised steps; the server applies it at once, v̂ −= η̄_i·U, with the round's
diminishing step. Growing rounds mean fewer rounds for the same gradients, so less aggregated noise.

The device's side is ``local-sgd-round/1`` (client/_privacy.py ``local_sgd_round``). Decisions (§5.8):
1. Noise: every step is noised, ŵ −= η̄(g_h + n_h), n_h ~ N(0, σ²C²), and U = Σ_h (g_h + n_h) over exactly
   s_i steps (issue 27: noised once, one example could move U by (2s+1)C). The device discards ŵ after the
   round, so the server's v̂ −= η̄·U is the only place U enters the shared model.
2-3. Schedules: ``linear`` s_i = b + ⌈a·i⌉ (Example 3: a = 1.3216, b = 16), ``ilogi`` s_i = b + ⌈a·z/ln z⌉
   with z = i + 2 (i/ln i is undefined at i ≤ 1), ``constant`` s_i = b. No built-in stop rule: the run (or
   the experiment) stops after K gradients or T rounds, whichever its operator sets.
4. Wait rule: a device in round i (= the rounds it has completed) gets a task only while i − k ≤ d, k = the
   fewest rounds any known device has completed (the barrier); d = 0 is lock-step, d = 1 the paper's choice.
5. Sizes are per device (s_{i,c} = s_i, Table 3 and Example 3's reading): 50 × 80 rounds × 5 clients =
   20,000. Equal shares p_c = 1/n of an all-client s_i are a = a_all/n, b = b_all/n.
6. Sampling: the device Poisson-samples at q_i = s_{i,c}/N_c (not with replacement) and puts each sampled
   example in one of the s_i steps at random, so each example is in a round at most once and the round is
   one Poisson-subsampled Gaussian event of sensitivity C at σ and its own q_i under replace-one (the
   argument is ``local_sgd_round``'s docstring): the ledger charges it like a DP-SGD step.
7. Step: η̄_i = η0/(1 + β·t_i) (``linear``, strongly convex) or η0/(1 + β·√t_i) (``sqrt``), t_i = Σ_{j<i} s_j
   counted per device (the paper's all-client count is n·t_i: absorbed in β). β = 0 is a constant step.
8. DP is per device (the ledger keeps each device's ε over its own data; the server is trusted only to run
   the ledger). Nothing proves convergence of the clipped, noised version (§5.8.7): the experiment measures.
Broadcast: Fleet devices pull; a task is computed on the newest version, which already holds every applied
round-sum, where the paper's client keeps working on the model of the last barrier k plus its own partial
round. So a device here sees other devices' round-sums as soon as they land (fresher, never staler); the
barrier only limits how far ahead a device may run. A device's round is the count of its applied pushes: a
lease that expires is granted again for the same round (and charged again, so ε stays an upper bound).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from fleet_protocol.accounting import LOCAL_SGD
from server.strategies.base import Arrival, Buffered, Strategy, StrategySettings, TaskTerms

SCHEDULES = ("linear", "ilogi", "constant")
DECAYS = ("linear", "sqrt")


class VanDijkSettings(StrategySettings):
    name: Literal["vandijk"] = "vandijk"
    vandijk_schedule: Literal["linear", "ilogi", "constant"] = Field(
        "linear", description="round sizes s_i: b + ⌈a·i⌉ (linear), b + ⌈a·z/ln z⌉ (ilogi) or b (constant)"
    )
    vandijk_a: float = Field(1.3216, ge=0, allow_inf_nan=False, description="a, the growth of the round size")
    vandijk_b: int = Field(16, ge=1, description="b = s₀, the first round's size per device")
    vandijk_beta: float = Field(
        0.01,
        ge=0,
        allow_inf_nan=False,
        description="β in η̄_i = η₀/(1 + β·t_i) or η₀/(1 + β√t_i); 0: constant",
    )
    vandijk_decay: Literal["linear", "sqrt"] = Field(
        "sqrt", description="step decay: linear (strongly convex) or sqrt (convex, non-convex)"
    )
    vandijk_delay_rounds: int = Field(1, ge=0, description="d: a device may run at most d rounds ahead")
    vandijk_noise_multiplier: float | None = Field(
        None, gt=0, description="σ of each step's noise; unset: the DP policy's (FLEET_DP_NOISE_MULTIPLIER)"
    )
    vandijk_clip: float | None = Field(
        None, gt=0, description="C per example; unset: the DP policy's (unclipped without DP)"
    )


def round_size(i: int, schedule: str, a: float, b: int) -> int:
    """s_i, the examples (local iterations) of round i on one device."""
    if schedule == "constant":
        return b
    if schedule == "linear":
        return b + math.ceil(a * i - 1e-9)
    if schedule == "ilogi":
        z = i + 2
        return b + math.ceil(a * z / math.log(z) - 1e-9)
    raise ValueError(f"unknown schedule {schedule!r}; known: {SCHEDULES}")


class VanDijk(Strategy):
    name = "vandijk"
    settings = VanDijkSettings

    def __init__(
        self,
        *,
        learning_rate: float | None = None,
        k: int = 1,
        time_window: float | None = None,
        vandijk_schedule: str = "linear",
        vandijk_a: float = 1.3216,
        vandijk_b: int = 16,
        vandijk_beta: float = 0.01,
        vandijk_decay: str = "sqrt",
        vandijk_delay_rounds: int = 1,
        vandijk_noise_multiplier: float | None = None,
        vandijk_clip: float | None = None,
    ) -> None:
        if vandijk_schedule not in SCHEDULES or vandijk_decay not in DECAYS:
            raise ValueError(f"schedule must be one of {SCHEDULES} and decay one of {DECAYS}")
        if vandijk_a < 0 or vandijk_b < 0 or vandijk_beta < 0 or vandijk_delay_rounds < 0:
            raise ValueError("vandijk_a, vandijk_b, vandijk_beta and vandijk_delay_rounds must be >= 0")
        if round_size(0, vandijk_schedule, vandijk_a, vandijk_b) < 1:
            raise ValueError("the first round must hold at least one example (vandijk_b >= 1)")
        super().__init__(learning_rate=learning_rate or 0.1, k=k, time_window=time_window)
        self.step0 = self.learning_rate
        self.schedule, self.a, self.b = vandijk_schedule, vandijk_a, vandijk_b
        self.beta, self.decay, self.delay_rounds = vandijk_beta, vandijk_decay, vandijk_delay_rounds
        self.noise_multiplier, self.clip = vandijk_noise_multiplier, vandijk_clip
        self.rounds: dict[str, int] = {}  # per device: rounds applied = the round it works on now

    # -- schedules -------------------------------------------------------------------------------
    def size(self, i: int) -> int:
        return round_size(i, self.schedule, self.a, self.b)

    def step(self, i: int) -> float:
        """η̄_i = η0 / (1 + β·t_i) or η0 / (1 + β·√t_i), t_i = Σ_{j<i} s_j."""
        t = sum(self.size(j) for j in range(i))
        return self.step0 / (1.0 + self.beta * (t if self.decay == "linear" else math.sqrt(t)))

    @property
    def barrier(self) -> int:
        """k: the rounds every known device has completed."""
        return min(self.rounds.values(), default=0)

    # -- hooks -----------------------------------------------------------------------------------
    def on_register(self, device_id: str) -> None:
        self.rounds.setdefault(device_id, 0)

    def terms_for(self, *, device_id: str, label_counts: np.ndarray | None) -> TaskTerms:
        self.on_register(device_id)
        i = self.rounds[device_id]
        terms = {
            "mechanism": LOCAL_SGD,
            "round": i,
            "local_steps": self.size(i),
            "expected_batch": self.size(i),
            "step_size": self.step(i),
            "clip": self.clip or 0.0,  # 0: unclipped without DP; with DP the ledger puts its policy's C
            "noise_multiplier": self.noise_multiplier or 0.0,
            "sampling_rate": 1.0,  # the ledger puts q_i = s_{i,c}/N_c (the device computes the same)
        }
        return TaskTerms(extra={"dp": terms})

    def admit(self, *, device_id: str, version: int, now: float) -> str | None:
        self.on_register(device_id)
        return "round_ahead" if self.rounds[device_id] - self.barrier > self.delay_rounds else None

    def weigh(self, arrival: Arrival) -> float:
        return self.step(self.rounds.get(arrival.device_id, 0))

    def receive(self, arrival: Arrival) -> float:
        """The round-sum is applied with its own round's step; the device moves to its next round."""
        weight = self.weigh(arrival)
        self.on_register(arrival.device_id)
        self.rounds[arrival.device_id] += 1
        self.buffer.append(Buffered(arrival.task_id, weight, arrival.gradient, arrival.received_at))
        return weight

    def aggregate(self, params: np.ndarray) -> np.ndarray:
        """v̂ − Σ η̄_i·U: the weights already are the messages' round steps (k = 1: one message per step)."""
        direction = self.combine(params)
        self.learning_rate = float(self.buffer[-1].weight) if self.buffer else self.learning_rate
        self.buffer.clear()
        self.updates += 1
        return self.capped(params, params - direction)

    def describe(self) -> dict[str, Any]:
        k = self.barrier
        return {
            **super().describe(),
            "barrier": k,
            "rounds_max": max(self.rounds.values(), default=0),
            "round_size": self.size(k),
            "round_step": self.step(k),
            "delay_rounds": self.delay_rounds,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rounds": dict(self.rounds), "learning_rate": self.learning_rate}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.rounds = {str(d): int(r) for d, r in state.get("rounds", {}).items()}
        self.learning_rate = float(state.get("learning_rate", self.learning_rate))

    def __repr__(self) -> str:
        return (
            f"VanDijk(schedule={self.schedule!r}, a={self.a}, b={self.b}, step0={self.step0},"
            f" beta={self.beta}, decay={self.decay!r}, d={self.delay_rounds})"
        )
