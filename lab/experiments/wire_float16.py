"""`wire-float16`: the accuracy cost of sending parameters and gradients as float16.

Paired runs: for one seed both encodings get the same initial model, partition, device order and
mini-batches; the only difference is that the float16 run pulls every parameter vector and pushes every
gradient in float16, through the wire's own encoding. Ten devices with IID MNIST shards push in turn
(staleness ≈ 9) to the coordinator core `fleet serve` runs (sim/scripted.py), AdaSGD with K = 1 built as
the server builds it. The table gives the test accuracy per seed (mean of the last three
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
from server.core.types import Rejection, TaskGrant
from sim.data import load_mnist, partition_iid
from sim.scripted import ScriptedFleet, strategy_factory

DEVICES, BATCH, LEARNING_RATE = 10, 64, 0.3


def train(*, seed: int, updates: int, float16: bool) -> list[float]:
    """Test accuracy every 50 updates of one run, through the coordinator core (sim/scripted.py): each
    device pulls its task's parameters and pushes its gradient in the wire's encoding (float16 rounds
    both, as GET …/params?encoding=float16 and a float16 push body do)."""
    bundle = builtin("mnist_cnn")
    train_set, test_set = load_mnist(seed=0)
    rng = np.random.default_rng(seed)
    shards = partition_iid(len(train_set), DEVICES, rng)
    session = GradientSession(bundle.manifest, bundle.train_onnx, 1)
    evaluator = Evaluator(bundle.manifest, bundle.infer_onnx, test_set.x, test_set.y)
    fleet = ScriptedFleet(
        bundle,
        strategy_factory(strategy="adasgd", learning_rate=LEARNING_RATE),
        label_counts=[np.bincount(train_set.y[s], minlength=10) for s in shards],
        batch=BATCH,
        encoding="float16" if float16 else "float32",
    )
    for device in range(DEVICES):  # every device starts on version 0, then pushes in turn (τ ≈ 9)
        _granted(fleet.ask(device))
    accuracy = []
    for step in range(updates):
        device = step % DEVICES
        grant, params = fleet.devices[device].grant, fleet.devices[device].params
        assert grant is not None and params is not None
        index = rng.choice(shards[device], size=grant.batch_size, replace=True)
        loss, gradient = session.loss_and_gradient(params, train_set.x[index], train_set.y[index])
        counts = np.bincount(train_set.y[index], minlength=10)
        fleet.clock.now = float(step)
        fleet.push(device, gradient, loss=float(loss), label_counts=counts)
        _granted(fleet.ask(device))
        if (step + 1) % 50 == 0:
            accuracy.append(evaluator.evaluate(fleet.params)[0])
    return accuracy


def _granted(answer: TaskGrant | Rejection) -> TaskGrant:
    if not isinstance(answer, TaskGrant):
        raise RuntimeError(f"the coordinator refused a task: {answer}")
    return answer


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
