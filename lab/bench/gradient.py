"""Device gradient time: the ONNX training graph in onnxruntime vs torch autograd on the same batch.

Both sides compute the mean cross-entropy loss and every parameter's gradient for one batch of 100
real-shaped inputs, with the same number of intra-op threads; runs are interleaved so that machine
noise hits both alike, and the ratio of medians is reported per model and thread count.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lab.bench.plans import GradientPlan

TARGETS = {"mnist_cnn": 1.0, "mlp": 0.35}  # onnxruntime / torch, from the performance issue


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` in ms over ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e3)
    return statistics.median(samples)


def measure(
    name: str, threads: int, *, batch: int = 100, rounds: int = 5, repeats: int = 40
) -> dict[str, Any]:
    import torch

    from client import GradientSession
    from models.manifest import builtin
    from models.zoo import BUILTINS, build

    bundle = builtin(name)
    rng = np.random.default_rng(0)
    x = rng.random((batch, *bundle.manifest.input_shape), dtype=np.float32)
    y = rng.integers(0, bundle.manifest.num_classes, batch)
    session = GradientSession(bundle.manifest, bundle.train_onnx, threads)
    module = build(name)
    flat = bundle.init_params
    # torch computes at the same point as onnxruntime: the bundle's initial parameters
    params = {
        spec.name: torch.from_numpy(
            flat[spec.offset : spec.offset + int(np.prod(spec.shape))].reshape(spec.shape)
        )
        for spec in bundle.manifest.params
    }
    assert params.keys() == dict(module.named_parameters()).keys()
    loss_fn = BUILTINS[name].loss
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def loss_of(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return loss_fn(torch.func.functional_call(module, p, (xt,)), yt)

    grad_and_value = torch.func.grad_and_value(loss_of)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(5):  # warm up both
            _, ort_gradient = session.loss_and_gradient(flat, x, y)
            torch_grads, _ = grad_and_value(params)
        # the two timed computations must compute the same gradient (parameters in manifest order)
        torch_flat = np.concatenate([torch_grads[p.name].numpy().ravel() for p in bundle.manifest.params])
        max_error = float(np.max(np.abs(np.asarray(ort_gradient) - torch_flat)))
        ort_ms, torch_ms = [], []
        for _ in range(rounds):
            ort_ms.append(median_ms(lambda: session.loss_and_gradient(flat, x, y), repeats))
            torch_ms.append(median_ms(lambda: grad_and_value(params), repeats))
    finally:
        torch.set_num_threads(previous)
    ort, ref = statistics.median(ort_ms), statistics.median(torch_ms)
    return {
        "model": name,
        "threads": threads,
        "onnxruntime_ms": round(ort, 3),
        "torch_ms": round(ref, 3),
        "ratio": round(ort / ref, 3),
        "max abs Δ gradient": float(f"{max_error:.2g}"),
        "target": f"≤ {TARGETS[name]}",
        "met": ort / ref <= TARGETS[name],
    }


def run(plan: GradientPlan) -> dict[str, Any]:
    rows = [
        measure(name, threads, rounds=plan.rounds, repeats=plan.repeats)
        for name in ("mnist_cnn", "mlp")
        for threads in (1, 2)
    ]
    for row in rows:
        print(
            f"gradient {row['model']:9s} {row['threads']} thr: onnxruntime {row['onnxruntime_ms']:.2f} ms, "
            f"torch {row['torch_ms']:.2f} ms, ratio {row['ratio']:.2f} (target {row['target']})"
        )
    return {
        "name": "gradient",
        "title": "Device gradient time (batch 100, median)",
        "table": rows,
        "note": "onnxruntime runs the exported training graph (client.GradientSession); torch runs "
        "torch.func.grad_and_value over the same module. Interleaved rounds, ratio of medians.",
    }
