"""DP-SGD's device cost: the per-example-clipped sum (dp_train.onnx) against the plain gradient (train.onnx).

Both graphs run in onnxruntime on the same batch of 100 at the bundle's initial parameters, with 1 and 2
intra-op threads; rounds interleave the two so machine noise hits both alike, and the ratio of medians is
reported per model and thread count (target from issue 15: at most 2.5x). Noise and Poisson sampling are
left out: they are numpy work of one pass over the parameters, not graph time.

`python -m lab run dp` writes docs/results/dp-overhead.json/.md (``--quick``: the -quick files); the next
`python -m lab run performance` shows the same table as its section "dp".
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from lab.bench import own
from lab.bench.gradient import median_ms
from lab.bench.plans import DP_FULL, DP_QUICK, DpPlan
from lab.contract import Context, Result

TARGET = 2.5  # clipped sum / plain gradient, batch 100 (issue 15)
TITLE = "DP-SGD clipped-gradient overhead (batch 100, median)"
NOTE = (
    "dp_train.onnx (client.DPGradientSession: per-example gradients clipped to C = 1 and summed) against "
    "train.onnx (client.GradientSession: the mean gradient), same batch, same parameters, onnxruntime "
    "only. Interleaved rounds, ratio of medians. Sampling and noise are not included."
)


def measure(
    name: str, threads: int, *, batch: int = 100, rounds: int = 5, repeats: int = 40
) -> dict[str, Any]:
    from client import DPGradientSession, GradientSession
    from models.manifest import builtin

    bundle = builtin(name)
    if bundle.dp_onnx is None:
        raise ValueError(f"{name} has no DP graph")
    rng = np.random.default_rng(0)
    x = rng.random((batch, *bundle.manifest.input_shape), dtype=np.float32)
    y = rng.integers(0, bundle.manifest.num_classes, batch)
    plain = GradientSession(bundle.manifest, bundle.train_onnx, threads)
    dp = DPGradientSession(bundle.manifest, bundle.dp_onnx, threads)
    flat = bundle.init_params
    for _ in range(5):  # warm up both
        _, gradient = plain.loss_and_gradient(flat, x, y)
        _, unclipped = dp.clipped_sum(flat, x, y, 1e9)
    # the two graphs compute the same thing when nothing is clipped: sum = batch x mean gradient
    max_error = float(np.max(np.abs(unclipped - gradient * batch)))
    plain_ms, dp_ms = [], []
    for _ in range(rounds):
        plain_ms.append(median_ms(lambda: plain.loss_and_gradient(flat, x, y), repeats))
        dp_ms.append(median_ms(lambda: dp.clipped_sum(flat, x, y, 1.0), repeats))
    base, clipped = statistics.median(plain_ms), statistics.median(dp_ms)
    return {
        "model": name,
        "threads": threads,
        "plain_ms": round(base, 3),
        "clipped_ms": round(clipped, 3),
        "ratio": round(clipped / base, 3),
        "max abs Δ (C = ∞, sum vs B × mean)": float(f"{max_error:.2g}"),
        "target": f"≤ {TARGET}",
        "met": clipped / base <= TARGET,
    }


def measure_all(plan: DpPlan) -> dict[str, Any]:
    rows = [
        measure(name, threads, rounds=plan.rounds, repeats=plan.repeats)
        for name in ("mnist_cnn", "mlp")
        for threads in (1, 2)
    ]
    for row in rows:
        print(
            f"dp {row['model']:9s} {row['threads']} thr: plain {row['plain_ms']:.2f} ms, "
            f"clipped {row['clipped_ms']:.2f} ms, ratio {row['ratio']:.2f} (target {row['target']})"
        )
    return {"name": "dp", "title": TITLE, "table": rows, "note": NOTE}


def run(plan: DpPlan, ctx: Context) -> Result:
    """Measure: dp-overhead.json/.md (the performance benchmark reads the record as its section "dp")."""
    from lab.bench import machine

    result = measure_all(plan)
    result["machine"] = machine()
    worst = max(result["table"], key=lambda r: r["ratio"])
    summary = (
        f"DP clipped sum / plain gradient at batch 100: worst {worst['ratio']:.2f}x "
        f"({worst['model']}, {worst['threads']} thread(s)); target ≤ {TARGET}x"
    )
    return Result({"text": summary}, records=result)


def markdown(result: Result, plan: DpPlan) -> str:
    from lab.bench import render_markdown

    own = render_markdown({"benchmarks": {"dp": result.records}}, summarise_scale_out=False)
    own = own.replace("# Performance", "# DP-SGD overhead", 1)
    return own.replace("`python -m lab run performance`", "`python -m lab run dp`", 1)


EXPERIMENT = own("dp", "dp-overhead", DP_QUICK, DP_FULL, run, markdown)
