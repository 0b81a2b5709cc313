"""A(DP)²SGD (Xu, Zhang, Wang; seed-algorithms.md §4) and its synchronous DP all-reduce baseline, on
virtual time.

K learners, each with its own model copy, data shard and compute speed. A learner's step is the device's
DP-SGD step (client/_privacy.py ``private_gradient``: Poisson-sample its shard at q = B/n_k, clip each
example's gradient to C, add N(0, σ²C²) to the sum, divide by B). Wall-clock is virtual seconds drawn from
per-learner step times, so comparisons do not depend on the machine's load.

Decisions on the spec's ambiguities (§4.7 and Alg. 1):
* Step order (Alg. 1 lines 6-9): a learner reads ŵ_k = its own model when it starts a step and computes
  the noisy gradient on that read; meanwhile peers may average into w_k, so ŵ_k is stale (the paper's
  "averaging and gradient computation run concurrently"). On finishing, it averages its *current* model
  with its peer's *current* model (an atomic exchange: no stale copy of the peer is used), both take the
  average, then the active learner alone applies its gradient: w_k ← avg − η·g̃, w_j ← avg.
* Peer: uniform among the K − 1 others (complete graph; the paper's App. A has each sender pick a random
  receiver; the sender/receiver split only avoids MPI deadlocks, which a simulation does not have).
* Noise per learner: every learner noises its own gradient, σ is a noise multiplier of the clip C on the
  sum (std σC/B on the mean, Δ₂ = C/B add/remove, 2C/B replace-one); SYNC does the same before the
  all-reduce (the paper: "in both SYNC and ADPSGD, we insert random noise into gradients").
* Stop: a global counter of mini-batches processed (the paper's App. A); SYNC counts K per round.
* Logical global view: the test accuracy of θ = the mean of the K local models (Theorem 1's θ^t).
  Averaging is doubly stochastic, so a step moves θ by exactly −η·g̃/K (the invariant the tests check).
* Learning rate: η for the first ``decay_at`` of the budget, then η/10 (the paper's step schedule, short).

Heterogeneity (the paper's §5.3; step time 1 virtual s per B = 16 examples, jitter ×U(0.9, 1.1)):
I "random-2x": each step of each learner is 2x slower with probability 1/K (SYNC: one random learner per
round); II "one-10x": learner 0 always 10x slower; III is a batch/rate change, not a speed case (2B, 2η).
Communication: a pairwise exchange costs ``exchange_time``; SYNC's ring all-reduce 2(K−1)/K of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from client import ClippedGradientComputer

GradientFn = Callable[[int, np.ndarray, np.random.Generator], np.ndarray]
"""(learner, model read ŵ, rng) → the learner's noisy mean gradient g̃."""
EvalFn = Callable[[np.ndarray], float]

CASES = ("equal", "random-2x", "one-10x")
BASE_BATCH = 16  # one virtual second of compute per 16 examples


@dataclass(frozen=True)
class Setting:
    """One run's knobs; ``total_steps`` is the global mini-batch counter, shared by SYNC and gossip."""

    learners: int = 16
    batch: int = 16
    lr: float = 0.1
    total_steps: int = 2000
    eval_every: int = 100
    case: str = "equal"
    exchange_time: float = 0.05
    decay_at: float = 0.8

    def __post_init__(self) -> None:
        if self.case not in CASES:
            raise ValueError(f"unknown heterogeneity case {self.case!r}; known: {CASES}")
        if self.learners < 2:
            raise ValueError("gossip needs at least 2 learners")

    def rate(self, steps: int) -> float:
        return self.lr if steps < self.decay_at * self.total_steps else self.lr / 10


def step_time(s: Setting, k: int, rng: np.random.Generator, slow: bool = False) -> float:
    """Virtual seconds of one local step of learner k (``slow``: case I's 2x hiccup)."""
    t = s.batch / BASE_BATCH * rng.uniform(0.9, 1.1)
    if s.case == "one-10x" and k == 0:
        t *= 10
    return t * 2 if slow else t


@dataclass
class Trace:
    """What a run leaves: accuracy of the logical global view over virtual time and over global steps."""

    method: str
    times: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    steps_per_learner: list[int] = field(default_factory=list)

    def record(self, time: float, steps: int, accuracy: float) -> None:
        self.times.append(float(time))
        self.steps.append(int(steps))
        self.accuracy.append(float(accuracy))

    def time_to(self, target: float) -> float | None:
        """The first virtual time the accuracy reached ``target`` (None: never)."""
        return next((t for t, a in zip(self.times, self.accuracy, strict=True) if a >= target), None)

    def as_dict(self) -> dict:
        return {"method": self.method, "times": self.times, "steps": self.steps, "accuracy": self.accuracy,
                "steps_per_learner": self.steps_per_learner, "final_accuracy": self.accuracy[-1],
                "virtual_seconds": self.times[-1]}  # fmt: skip


class Gossip:
    """The K local models and Alg. 1's update: pairwise averaging, then the active learner's step."""

    def __init__(self, init: np.ndarray, learners: int) -> None:
        self.models = np.tile(np.asarray(init, dtype=np.float64), (learners, 1))

    def mean(self) -> np.ndarray:
        return self.models.mean(axis=0)

    def apply(self, k: int, peer: int, gradient: np.ndarray, lr: float) -> None:
        if k == peer:
            raise ValueError("a learner does not gossip with itself")
        average = (self.models[k] + self.models[peer]) / 2
        self.models[peer] = average
        self.models[k] = average - lr * gradient


def run_gossip(
    s: Setting, init: np.ndarray, gradient: GradientFn, evaluate: EvalFn, rng: np.random.Generator
) -> Trace:
    """A(DP)²SGD: each learner steps at its own pace and gossips with a random peer when it finishes."""
    K = s.learners
    gossip = Gossip(init, K)
    reads = [gossip.models[k].copy() for k in range(K)]
    pending = [(_draw(s, k, rng), k, k) for k in range(K)]  # (finish time, tie-break, learner)
    heapq.heapify(pending)
    trace, counts, seq = Trace("adp2sgd"), [0] * K, K
    trace.record(0.0, 0, evaluate(gossip.mean()))
    for done in range(1, s.total_steps + 1):
        now, _, k = heapq.heappop(pending)
        g = gradient(k, reads[k], rng)
        peer = (k + 1 + int(rng.integers(K - 1))) % K  # uniform over the others
        gossip.apply(k, peer, g, s.rate(done - 1))
        counts[k] += 1
        now += s.exchange_time
        reads[k] = gossip.models[k].copy()
        heapq.heappush(pending, (now + _draw(s, k, rng), seq, k))
        seq += 1
        if done % s.eval_every == 0 or done == s.total_steps:
            trace.record(now, done, evaluate(gossip.mean()))
    trace.steps_per_learner = counts
    return trace


def run_sync(
    s: Setting, init: np.ndarray, gradient: GradientFn, evaluate: EvalFn, rng: np.random.Generator
) -> Trace:
    """SYNC: every learner computes a noisy gradient on the same model; the round waits for the slowest,
    then a ring all-reduce averages them (the same as averaging the K updated models)."""
    K = s.learners
    model = np.asarray(init, dtype=np.float64).copy()
    trace, now, done = Trace("sync"), 0.0, 0
    trace.record(0.0, 0, evaluate(model))
    allreduce = 2 * (K - 1) / K * s.exchange_time
    rounds = max(1, s.total_steps // K)
    every = max(1, s.eval_every // K)
    for r in range(1, rounds + 1):
        hiccup = int(rng.integers(K)) if s.case == "random-2x" else -1
        now += max(round_times(s, rng, hiccup)) + allreduce
        lr = s.rate(done)
        model -= lr * np.mean([gradient(k, model, rng) for k in range(K)], axis=0)
        done += K
        if r % every == 0 or r == rounds:
            trace.record(now, done, evaluate(model))
    trace.steps_per_learner = [rounds] * K
    return trace


def round_times(s: Setting, rng: np.random.Generator, hiccup: int = -1) -> list[float]:
    """The K learners' step times in one SYNC round (``hiccup``: the learner slowed 2x, case I)."""
    return [step_time(s, k, rng, slow=k == hiccup) for k in range(s.learners)]


def _draw(s: Setting, k: int, rng: np.random.Generator) -> float:
    slow = s.case == "random-2x" and rng.random() < 1 / s.learners
    return step_time(s, k, rng, slow)


def dp_gradient_fn(
    session: ClippedGradientComputer,
    shards: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    batch: int,
    clip: float,
    sigma: float,
) -> GradientFn:
    """Learner k's step as a Fleet device runs it (``private_gradient`` on ``dp_train.onnx``)."""
    from client import private_gradient

    def gradient(k: int, params: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x, y = shards[k]
        out = private_gradient(session, params.astype(np.float32), x, y, clip=clip, noise_multiplier=sigma,
                               expected_batch=batch, rng=rng)  # fmt: skip
        return out.gradient.astype(np.float64)

    return gradient
