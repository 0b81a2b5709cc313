"""The arms of online-vs-standard besides Fleet online (sim/online.py), each a prequential trainer.

Every arm is scored the same way (``Scorer``: each hour's data with the model in force at the hour's
start, then the arm may train on it) and spends gradients the same way (the bundle's ONNX training
graph, ``Model.loss_and_gradient``), so they differ only in *when* they train and on *whose* data:

* ``standard``: synchronous FedAvg rounds at fixed times over the devices ``eligible_standard`` then
  (idle, charging, unmetered). Each participant runs ``steps`` local SGD steps on mini-batches of its
  own window, and the server averages the local models weighted by window size. A round's gradient
  budget is the run's budget over the number of rounds; a round nobody can join (or one whose budget
  buys less than one step each) carries its budget to the next, and local steps are capped.
* ``oracle``: every hour, centralised SGD on every device's recent data pooled, spending in each hour
  what the online arm spent in it (the same budget at the same times, with no staleness, no
  federation and no availability limits): the drift streams' reference.
* ``popular``: no learning; the most frequent labels of the previous hour, over all devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.diurnal import DiurnalFleet
from sim.online import HOUR, Model, StreamData
from sim.streams import DeviceStreams, f1_at_k, hourly_chunks


class Scorer:
    """Each hour's data of every device, and the per-query metric summed over it."""

    def __init__(self, model: Model, data: StreamData, horizon: float) -> None:
        self.model, self.data = model, data
        self.hours = list(hourly_chunks(0.0, horizon))
        self.tests = [data.streams.between(lo, hi)[1:] for lo, hi in self.hours]

    def hit_sum(self, h: int, scores: np.ndarray) -> float:
        """The metric summed over hour ``h``'s queries, for these scores (restricted to real classes)."""
        y = self.tests[h][1]
        if not len(y):
            return 0.0
        scores = scores[:, : self.data.n_classes]
        if self.data.metric == "f1@5":
            return float(np.sum(f1_at_k(scores, y, 5, average=False)))
        return float(np.sum(np.argmax(scores, axis=1) == y))

    def score(self, h: int, params: np.ndarray) -> float:
        X = self.tests[h][0]
        return self.hit_sum(h, self.model.scores(params, X)) if len(X) else 0.0

    def counts(self) -> list[int]:
        return [len(y) for _, y in self.tests]


@dataclass
class ArmLog:
    """An arm's hourly metric sums and what it spent."""

    sums: list[float] = field(default_factory=list)
    examples: int = 0
    rounds: list[dict[str, float]] = field(default_factory=list)  # standard: time, participants, steps


def fedavg_round(
    model: Model,
    view: DeviceStreams,
    devices: np.ndarray,
    t: float,
    params: np.ndarray,
    available: float,
    *,
    batch: int,
    lr: float,
    max_steps: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, int, int]:
    """One synchronous FedAvg round at ``t``: returns (new parameters, examples spent, local steps)."""
    sizes = np.array([min(batch, int(view.window(int(d), t)[2].size)) for d in devices], dtype=float)
    devices, sizes = devices[sizes > 0], sizes[sizes > 0]
    steps = min(max_steps, int(round(available / sizes.sum()))) if sizes.size else 0
    if steps < 1:
        return params, 0, 0
    total, weight, spent = np.zeros_like(params), 0.0, 0
    for d in devices:
        d = int(d)
        local = params.copy()
        for _ in range(steps):
            X, y = view.batch(d, t, batch, rng)
            local -= lr * model.loss_and_gradient(local, X, y)[1]
            spent += len(y)
        n = view.window(d, t)[2].size
        total += n * local
        weight += n
    return (total / weight).astype(np.float32), spent, steps


def standard(
    scorer: Scorer,
    view: DeviceStreams,
    fleet: DiurnalFleet,
    rounds: list[float],
    budget: int,
    *,
    batch: int,
    lr: float,
    max_steps: int,
    seed: int,
) -> ArmLog:
    """Standard FL with rounds at ``rounds`` (seconds), ``budget`` examples over the run."""
    rng = np.random.default_rng([seed, 41])
    params, log = scorer.model.init_params, ArmLog()
    share, carry, pending = budget / max(len(rounds), 1), 0.0, sorted(rounds)
    for h, (_, hi) in enumerate(scorer.hours):
        log.sums.append(scorer.score(h, params))
        while pending and pending[0] < hi:
            t = pending.pop(0)
            carry += share
            eligible = np.flatnonzero(fleet.eligible_mask(t))
            params, spent, steps = fedavg_round(
                scorer.model,
                view,
                eligible,
                t,
                params,
                carry,
                batch=batch,
                lr=lr,
                max_steps=max_steps,
                rng=rng,
            )
            carry -= spent
            log.examples += spent
            log.rounds.append({"t": t, "eligible": int(eligible.size), "steps": steps, "examples": spent})
    return log


def oracle(
    scorer: Scorer,
    view: DeviceStreams,
    examples_by_hour: dict[int, int],
    *,
    batch: int,
    lr: float,
    seed: int,
) -> ArmLog:
    """Centralised SGD at the end of each hour on every device's data of the last window, spending what
    the online arm spent in that hour (carried over while the pool is empty)."""
    rng = np.random.default_rng([seed, 43])
    params, log, carry = scorer.model.init_params, ArmLog(), 0.0
    for h, (_, hi) in enumerate(scorer.hours):
        log.sums.append(scorer.score(h, params))
        carry += examples_by_hour.get(h, 0)
        _, X, y = view.between(hi - view.bound.max_age_s, hi)
        if not len(y):
            continue
        while carry >= batch / 2:
            idx = rng.choice(len(y), size=min(batch, len(y)), replace=False)
            params = params - lr * scorer.model.loss_and_gradient(params, X[idx], y[idx])[1]
            carry -= idx.size
            log.examples += idx.size
    return log


def popular(scorer: Scorer) -> ArmLog:
    """The previous hour's most frequent labels over all devices (the last non-empty hour's at night)."""
    log = ArmLog()
    counts = np.zeros(scorer.data.n_classes)
    for h in range(len(scorer.hours)):
        y = scorer.tests[h][1]
        tie_break = -1e-9 * np.arange(counts.size)  # a fixed order among equal counts
        log.sums.append(scorer.hit_sum(h, np.tile(counts + tie_break, (len(y), 1))))
        if len(y):
            counts = np.bincount(y, minlength=scorer.data.n_classes).astype(float)
    return log


def round_times(horizon: float, every_h: float, first_h: float) -> list[float]:
    """Round times every ``every_h`` hours starting at ``first_h`` (mod ``every_h``) in ``[0, horizon)``."""
    start = (first_h % every_h) * HOUR
    return [float(t) for t in np.arange(start, horizon, every_h * HOUR)]
