"""Issue 28's second probe: candidate defaults on the choice half, before the experiment measures them.

Not an experiment (no plans, no results file): each arm on each given workload (sim/workloads.py) in the
simulator with the peer benchmark's timing, printing one JSON line per run: the accuracy curve, the
curve of a Polyak average of the parameters (an EMA over ~``--ema`` gradients, evaluated beside the
served model), and the per-class recall at the end. ``python -m lab.probes.default_candidates
labels1-mlp labels2-cnn --arms old,fedbuff``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from itertools import count
from typing import Any

import numpy as np


def arms() -> dict[str, tuple[Callable[[float], Any], float]]:
    """name → (the strategy at a rate, its own rate)."""
    from server.strategies import DynSGD, DynSGDClip, FedBuff, FedBuffEqual
    from server.strategies.fairness import EqualShare, FleetStaleness
    from server.strategies.guard import LossGuard
    from server.strategies.wrappers import ClipNorm, Momentum, WarmUp

    def buff(k: int, factor: float | None, until: int | None = None) -> Callable[[float], Any]:
        def build(lr: float) -> Any:
            inner = FedBuff(learning_rate=lr, k=k)
            if factor is not None:
                inner = ClipNorm(inner, factor=factor, until=until)
            return EqualShare(WarmUp(inner))

        return build

    return {
        "old": (lambda lr: DynSGDClip(learning_rate=lr), 0.5),
        "dynsgd": (lambda lr: DynSGD(learning_rate=lr), 0.2),
        "fedbuff": (lambda lr: FedBuff(learning_rate=lr, k=10), 0.4),
        "dynsgd+warmclip": (lambda lr: WarmUp(ClipNorm(DynSGD(learning_rate=lr), until=200)), 0.5),
        "old+momentum": (lambda lr: Momentum(DynSGDClip(learning_rate=lr)), 0.05),
        "old+equal": (lambda lr: EqualShare(DynSGDClip(learning_rate=lr)), 0.5),
        "n1": (buff(5, 1.0), 0.4),
        "n2": (buff(5, 2.0), 0.4),
        "n10-1": (buff(10, 1.0), 0.5),
        "n-warmclip": (buff(5, 1.0, until=200), 0.4),
        "n-noclip": (buff(5, None), 0.4),
        "k1-warmclip": (buff(1, 1.0, until=200), 0.4),
        "k1-clip2": (buff(1, 2.0), 0.4),
        "k1-noclip": (buff(1, None), 0.4),
        "p1": (
            lambda lr: EqualShare(
                FleetStaleness(WarmUp(ClipNorm(FedBuff(learning_rate=lr, k=5), factor=2.0)))
            ),
            0.4,
        ),
        "p2": (
            lambda lr: EqualShare(FleetStaleness(WarmUp(ClipNorm(DynSGD(learning_rate=lr), factor=2.0)))),
            0.5,
        ),
        "p3": (lambda lr: EqualShare(FleetStaleness(WarmUp(ClipNorm(DynSGD(learning_rate=lr))))), 0.5),
        "n2-fe": (buff(5, 2.0), 0.4),
        "fe-adaptive": (lambda lr: adaptive(lr), 0.2),
        "fe-old": (lambda lr: FedBuffEqual(learning_rate=lr, concurrency_reference=None), 0.2),
        "fe-cs20": (lambda lr: FedBuffEqual(learning_rate=lr, concurrency_reference=20.0), 0.2),
        "fe-cs10": (lambda lr: FedBuffEqual(learning_rate=lr, concurrency_reference=10.0), 0.2),
        "fe-lin20": (lambda lr: scaled(lr, 20.0, 1.0), 0.2),
        "fe-lin40": (lambda lr: scaled(lr, 40.0, 1.0), 0.2),
        "fe-sqrt20": (lambda lr: scaled(lr, 20.0, 0.5), 0.2),
        "fe-guard": (lambda lr: LossGuard(FedBuffEqual(learning_rate=lr)), 0.4),
        "fe-ref10": (lambda lr: FedBuffEqual(learning_rate=lr, concurrency_reference=10.0), 0.4),
        "fe-guard-ref10": (
            lambda lr: LossGuard(FedBuffEqual(learning_rate=lr, concurrency_reference=10.0)),
            0.4,
        ),
    }


def scaled(lr: float, reference: float, power: float) -> Any:
    """fedbuff-equal whose rate shrinks as (reference / the fleet's median staleness)^power."""
    from server.strategies import FedBuffEqual
    from server.strategies.fairness import ConcurrencyScale

    strategy = FedBuffEqual(learning_rate=lr, concurrency_reference=None)
    strategy.inner = ConcurrencyScale(strategy.inner, reference=reference, power=power)
    return strategy


def adaptive(lr: float) -> Any:
    """fedbuff-equal whose K grows with the devices active lately (a quarter of them, at least 5)."""
    from server.strategies import FedBuffEqual

    strategy = FedBuffEqual(learning_rate=lr, concurrency_reference=None)
    fedbuff = strategy.inner.inner.inner
    ready = fedbuff.ready

    def adaptive_ready(now: float) -> bool:
        fedbuff.k = max(5, len(strategy.counts) // 4)
        return ready(now)

    fedbuff.ready = adaptive_ready
    return strategy


def peer_speeds(milliseconds: np.ndarray) -> list[float]:
    """'GFLOP/s' at 1e6 flops a sample such that a sample takes 1 ms of compute + its delay."""
    return [1.0 / (ms + 1.0) for ms in milliseconds]


def run(name: str, arm: str, gradients: int | None, ema: int, factor: float = 1.0) -> dict[str, Any]:
    from models.manifest import builtin
    from sim.controlled import Workbench
    from sim.fleet import FleetSimulator
    from sim.population import FleetTiming
    from sim.workloads import workload

    build, base = arms()[arm]
    w = workload(name)
    train, test = w.data()
    bench = Workbench(builtin(w.model), train, test)
    shards = w.shards(train)
    timing = FleetTiming(flops_per_sample=1e6, latency_median=0.005, latency_sigma=0.3,
                         mean_online=1e12, mean_offline=1e-3, churn=0.0)  # fmt: skip
    joined = count()
    averaged: list[float] = []
    state: dict[str, Any] = {"ema": None}
    decay = 1.0 - 1.0 / ema

    class Probe(FleetSimulator):
        def _push(self, i: int, grant: Any, drawn: Any) -> None:
            params = self.core.run.params
            previous = state["ema"]
            state["ema"] = params.copy() if previous is None else decay * previous + (1 - decay) * params
            super()._push(i, grant, drawn)

        def _evaluate(self) -> None:
            super()._evaluate()
            if state["ema"] is not None:
                averaged.append(self.bench.evaluate(state["ema"], None)[0])
            else:
                averaged.append(self.result.accuracy[-1])

    sim = Probe(
        bench, lambda: build(base * factor), devices=w.devices, seed=1, timing=timing,
        shard_for=lambda _rng: shards[next(joined) % len(shards)], batch=w.batch or 100,
        speeds=peer_speeds(w.speeds()), eval_every_gradients=max(1, gradients // 40),
    )  # fmt: skip
    started = time.perf_counter()
    result = sim.run(max_gradients=gradients)
    recall = bench.evaluator.per_class_recall(sim.core.run.params)
    return {
        "workload": name, "arm": arm, "lr": base * factor,
        "final": round(float(np.mean(result.accuracy[-5:])), 4),
        "final_ema": round(float(np.mean(averaged[-5:])), 4), "best": max(result.accuracy),
        "times": [round(t, 2) for t in result.times], "accuracy": result.accuracy, "ema": averaged,
        "recall": [round(float(r), 2) for r in recall], "diverged": result.diverged,
        "described": {k: v for k, v in sim.core.run.strategy.describe().items() if "concurrency" in k},
        "wall_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--arms", default=",".join(arms()))
    parser.add_argument("--gradients", type=int, default=3000)
    parser.add_argument("--ema", type=int, default=200)
    args = parser.parse_args()
    for name in args.workloads:
        for arm in args.arms.split(","):
            arm, _, factor = arm.partition("@")
            print(json.dumps(run(name, arm, args.gradients, args.ema, float(factor or 1))), flush=True)


if __name__ == "__main__":
    main()
