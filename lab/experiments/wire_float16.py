"""`wire-float16`: the accuracy cost of sending parameters and gradients as float16.

Paired runs: for one seed both encodings get the same initial model, partition, device order and
mini-batches; the only difference is that the float16 run rounds every pulled parameter vector and
every pushed gradient to float16, as the wire would. Ten devices with IID MNIST shards push in turn
(staleness ≈ 9), AdaSGD with K = 1. The table gives the test accuracy per seed (mean of the last three
evaluations, every 50 updates) and the paired difference with its spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from client import GradientSession
from lab.contract import Context, Experiment, Plan, Result
from models.manifest import builtin
from server.core.evaluation import Evaluator
from server.strategies import AdaSGD, Arrival
from sim.data import load_mnist, partition_iid

DEVICES, BATCH, LEARNING_RATE = 10, 64, 0.3


def train(*, seed: int, updates: int, float16: bool) -> list[float]:
    """Test accuracy every 50 updates of one run."""
    bundle = builtin("mnist_cnn")
    train_set, test_set = load_mnist(seed=0)
    rng = np.random.default_rng(seed)
    shards = partition_iid(len(train_set), DEVICES, rng)
    session = GradientSession(bundle.manifest, bundle.train_onnx, 1)
    evaluator = Evaluator(bundle.manifest, bundle.infer_onnx, test_set.x, test_set.y)
    strategy = AdaSGD(learning_rate=LEARNING_RATE)
    wire = (lambda a: a.astype(np.float16).astype(np.float32)) if float16 else (lambda a: a)
    history = {0: bundle.init_params.copy()}
    params, version = history[0], 0
    base = [0] * DEVICES
    accuracy = []
    for step in range(updates):
        device = step % DEVICES
        index = rng.choice(shards[device], size=BATCH, replace=True)
        loss, gradient = session.loss_and_gradient(
            wire(history[base[device]]), train_set.x[index], train_set.y[index]
        )
        counts = np.bincount(train_set.y[index], minlength=10)
        strategy.receive(
            Arrival(
                str(step),
                str(device),
                base[device],
                version - base[device],
                wire(gradient),
                counts,
                BATCH,
                loss,
                float(step),
            )
        )
        params = strategy.aggregate(params)
        version = step + 1
        history[version] = params
        history.pop(version - 2 * DEVICES, None)
        base[device] = version
        if (step + 1) % 50 == 0:
            accuracy.append(evaluator.evaluate(params)[0])
    return accuracy


@dataclass(frozen=True, kw_only=True)
class WirePlan(Plan):
    seeds: int = 5  # from --seed on
    updates: int = 1000


FULL = WirePlan()
QUICK = WirePlan(quick=True, seeds=2, updates=150)


def run(plan: WirePlan, ctx: Context) -> Result:
    seeds = [ctx.seed + i for i in range(plan.seeds)]
    updates = plan.updates
    runs = {
        s: {enc: train(seed=s, updates=updates, float16=enc == "float16") for enc in ("float32", "float16")}
        for s in seeds
    }
    final = {
        s: {enc: float(np.mean(r[enc][-3:])) for enc in r} for s, r in runs.items()
    }  # last 3 evaluations
    differences = np.array([(final[s]["float32"] - final[s]["float16"]) * 100 for s in seeds])
    summary = {
        "seeds": seeds,
        "updates": updates,
        "accuracy_float32_mean": float(np.mean([f["float32"] for f in final.values()])),
        "accuracy_float16_mean": float(np.mean([f["float16"] for f in final.values()])),
        "loss_points_mean": float(differences.mean()),
        "loss_points_std": float(differences.std(ddof=1)),
        "loss_points_range": [float(differences.min()), float(differences.max())],
        "target_points": 0.5,
        "met": bool(differences.mean() < 0.5),
    }
    records = {
        "series": {str(s): r for s, r in runs.items()},
        "setup": {
            "devices": DEVICES,
            "batch": BATCH,
            "learning_rate": LEARNING_RATE,
            "partition": "iid",
            "strategy": "AdaSGD(K=1, defaults)",
            "model": "mnist_cnn",
        },
    }
    return Result(summary, records=records)


def markdown(result: Result, plan: WirePlan) -> str:
    summary, series = result.summary, result.records["series"]
    final = {
        s: {enc: float(np.mean(r[enc][-3:])) for enc in r} for s, r in series.items()
    }  # last 3 evaluations
    rows = [
        f"| {s} | {f['float32']:.4f} | {f['float16']:.4f} | {(f['float32'] - f['float16']) * 100:+.2f} |"
        for s, f in final.items()
    ]
    return "\n".join(
        [
            "# Float16 on the wire: accuracy cost",
            "",
            __doc__.split("\n\n", 1)[1].strip(),
            "",
            "| seed | float32 accuracy | float16 accuracy | cost (points) |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Paired cost: {summary['loss_points_mean']:+.2f} ± {summary['loss_points_std']:.2f} points "
            f"(range {summary['loss_points_range'][0]:+.2f} to {summary['loss_points_range'][1]:+.2f}); "
            f"target < 0.5 points: {'met' if summary['met'] else 'missed'}.",
            "",
        ]
    )


def _plot(result: Result) -> Any:
    runs = result.records["series"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for encoding, style in (("float32", "-"), ("float16", "--")):
        curves = np.array([r[encoding] for r in runs.values()])
        x = np.arange(1, curves.shape[1] + 1) * 50
        ax.plot(x, curves.mean(axis=0), style, label=f"{encoding} (mean of {len(curves)} seeds)")
    ax.set_xlabel("updates")
    ax.set_ylabel("test accuracy")
    ax.set_title("Float16 vs float32 on the wire (paired seeds)")
    ax.legend()
    return fig


EXPERIMENT = Experiment("wire-float16", QUICK, FULL, run, markdown, _plot, title="float16 on the wire")
