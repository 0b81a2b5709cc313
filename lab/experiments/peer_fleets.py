"""Issue 19's simulated fleets, which the AdaSGD and loss-guard experiments still run on.

Issue 19 chose the default here (its search now runs on the suite of sim/workloads.py: default_search.py).
Every candidate runs on simulated fleets that are always online with fixed per-device speeds spread 7x
(the peer benchmark's 0.5-3.5 ms per sample on top of ~1 ms of compute, `python -m lab run peer`), with the
real ONNX gradients of the thesis CNN, batch 100. Workloads: 20 devices × 2 label-sorted shards (the
peer workload), the same 20 with IID data, 100 devices × 40 digits, and 1,000 devices × 80 digits drawn
from 100 sorted shards (shards overlap). Rates are tuned on data seed 1000 (another shuffle and
split of the 5,000 digits than any reported run); reported: seeds 1-3. Each strategy's rate curve
(time to target against 0.25x-4x its rate) shows which ones forgive a wrong rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from server.strategies import Strategy

TUNE_SEED = 1000
REPORT_SEEDS = (1, 2, 3)
RATE_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
SGD_GRID = (0.1, 0.2, 0.4, 0.8)
ADAPTIVE_GRID = (0.0025, 0.005, 0.01, 0.02)


def candidates() -> dict[str, tuple[Callable[[float], Strategy], tuple[float, ...]]]:
    """name → (strategy built at a learning rate, the rate grid it is tuned over)."""
    from server.strategies import AdaSGD, DynSGD, DynSGDClip, FedBuff
    from server.strategies.adabuff import AdaBuff
    from server.strategies.fedadam import FedAdam
    from server.strategies.wrappers import ClipNorm, WarmUp

    return {
        "adasgd": (lambda lr: AdaSGD(learning_rate=lr), SGD_GRID),
        "dynsgd": (lambda lr: DynSGD(learning_rate=lr), SGD_GRID),
        "fedbuff": (lambda lr: FedBuff(learning_rate=lr, k=10), SGD_GRID),
        "adabuff": (lambda lr: AdaBuff(learning_rate=lr, k=10), SGD_GRID),
        "fedadam": (lambda lr: FedAdam(learning_rate=lr, k=10), ADAPTIVE_GRID),
        "adasgd+clip+warmup": (lambda lr: WarmUp(ClipNorm(AdaSGD(learning_rate=lr))), SGD_GRID),
        "dynsgd+clip": (lambda lr: ClipNorm(DynSGD(learning_rate=lr)), SGD_GRID),
        "fedbuff+clip+warmup": (lambda lr: WarmUp(ClipNorm(FedBuff(learning_rate=lr, k=10))), SGD_GRID),
        "dynsgd-clip": (lambda lr: DynSGDClip(learning_rate=lr), SGD_GRID),
    }


@dataclass(frozen=True)
class Workload:
    devices: int
    partition: str  # "sorted" (2 label-sorted shards per device) or "iid"
    digits: int  # per device
    target: float
    cap: int  # gradients
    eval_every: int  # gradients


WORKLOADS = {
    "peer-20": Workload(20, "sorted", 200, 0.90, 8_000, 40),
    "iid-20": Workload(20, "iid", 200, 0.90, 8_000, 40),
    "fleet-100": Workload(100, "sorted", 40, 0.90, 16_000, 100),
    "fleet-1000": Workload(1000, "sorted", 80, 0.90, 20_000, 500),
    "quick-20": Workload(20, "sorted", 200, 0.90, 300, 50),  # tests: a few hundred gradients
}


@dataclass(frozen=True)
class Run:
    candidate: str
    lr: float
    workload: str
    seed: int

    def key(self) -> str:
        return f"{self.candidate}_lr{self.lr}_{self.workload}_s{self.seed}"

    def spec(self) -> dict[str, Any]:
        return {"run": asdict(self), "workload": asdict(WORKLOADS[self.workload]), "v": 1}


_BENCHES: dict[int, Any] = {}


def workbench(seed: int) -> Any:
    """Data seed → a Workbench on that shuffle and train/test split (one per process)."""
    if seed not in _BENCHES:
        from models.manifest import builtin
        from sim.controlled import Workbench
        from sim.data import load_mnist

        train, test = load_mnist(seed=seed)
        _BENCHES[seed] = Workbench(builtin("mnist_cnn"), train, test)
    return _BENCHES[seed]


def shard_maker(w: Workload, labels: np.ndarray, seed: int) -> Callable[[np.random.Generator], np.ndarray]:
    """Each new device's digits: disjoint shards while they last (20 and 100 devices), then drawn."""
    from sim.data import partition_iid, partition_sorted_shards

    rng = np.random.default_rng([seed, 7])
    if w.devices * w.digits <= len(labels):
        pool = np.sort(rng.choice(len(labels), w.devices * w.digits, replace=False))
        parts = (
            partition_iid(len(pool), w.devices, rng)
            if w.partition == "iid"
            else partition_sorted_shards(labels[pool], w.devices, rng)
        )
        dealt = iter([pool[p] for p in parts])
        return lambda r: next(dealt)
    shards = np.array_split(np.argsort(labels, kind="stable"), 2 * len(labels) // w.digits)
    return lambda r: np.concatenate([shards[i] for i in r.choice(len(shards), 2, replace=False)])


def peer_speeds(devices: int) -> list[float]:
    """'GFLOP/s' such that a 100-sample task takes 100 × (delay + 1 ms): delays 0.5 … 3.5 ms/sample."""
    return [1.0 / (d + 1.0) for d in np.linspace(0.5, 3.5, devices)]


def simulator(run: Run, factory: Callable[[], Strategy] | None = None) -> Any:
    """The run's fleet: always online, fixed speeds, its workload's shards (``factory`` overrides the
    candidate, e.g. to record what the strategy sees)."""
    from sim.fleet import FleetSimulator
    from sim.population import FleetTiming

    w = WORKLOADS[run.workload]
    bench = workbench(run.seed)
    build, _ = candidates()[run.candidate]
    timing = FleetTiming(
        flops_per_sample=1e6,
        latency_median=0.005,
        latency_sigma=0.3,
        mean_online=1e12,
        mean_offline=1e-3,
        churn=0.0,
    )
    return FleetSimulator(
        bench,
        factory or (lambda: build(run.lr)),
        devices=w.devices,
        shard_for=shard_maker(w, bench.train.y, run.seed),
        seed=run.seed,
        timing=timing,
        speeds=peer_speeds(w.devices),
        eval_every_gradients=w.eval_every,
    )


def simulate(run: Run) -> dict[str, Any]:
    w = WORKLOADS[run.workload]
    result = simulator(run).run(max_gradients=w.cap, target=w.target, give_up=collapsed)
    hit = result.first_time_at(w.target)
    final = result.accuracy[-1] if result.accuracy else 0.0
    return {
        "run": asdict(run),
        "times": [round(t, 3) for t in result.times],
        "accuracy": [round(a, 4) for a in result.accuracy],
        "gradients_at": result.gradients_at_eval,
        "time_to_target": hit[0] if hit else None,
        "gradients_to_target": hit[2] if hit else None,
        "end_time": result.end_time,
        "gradients": result.gradients,
        "diverged": result.diverged,
        "final_accuracy": final,
        "staleness_p50": float(np.median(result.staleness)) if result.staleness else None,
        "staleness_p99": float(np.percentile(result.staleness, 99)) if result.staleness else None,
    }


def collapsed(result: Any, evaluations: int = 10, chance: float = 0.15) -> bool:
    """A dead model: the last ``evaluations`` evaluations identical and at chance level (a too-large rate
    kills every ReLU and the model answers one class forever). A slow start fluctuates, so it goes on."""
    tail = result.accuracy[-evaluations:]
    return len(result.accuracy) > 2 * evaluations and max(tail) <= chance and max(tail) - min(tail) < 1e-9


def censored_time(output: dict[str, Any]) -> float:
    """Time to target, or the run's end (censored) for a miss; a divergence ranks last."""
    if output["time_to_target"] is not None:
        return float(output["time_to_target"])
    return math.inf if output["diverged"] else float(output["end_time"]) * 1.0001
