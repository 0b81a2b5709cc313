"""Export a built-in model to a bundle: training graph (loss + gradients), inference graph, init, manifest.

The joint forward+backward is traced with ``make_fx(grad_and_value(...))`` and exported with the dynamo
ONNX exporter, because torch.export cannot export a module that calls autograd itself; the result runs
in plain onnxruntime (onnxruntime-training is frozen at 1.19 and not used).

Usage: ``python -m models.export [--out DIR] [NAME...]`` (default: every built-in into models/artifacts).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import torch
from torch.export import Dim
from torch.fx.experimental.proxy_tensor import make_fx

from models.decompositions import training_decompositions
from models.graph_rewrite import drop_offset_pools
from models.manifest import BUILTIN_DIR, Bundle, Manifest, ParamSpec
from models.zoo import BUILTINS, build

OPSET = 18
TRACE_BATCH = 4  # any size > 1 so the batch dimension is not specialised


def export_bundle(name: str, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Export built-in ``name`` into ``out_dir`` (the four bundle files) and return that directory."""
    module = build(name, seed=seed).eval()  # raises KeyError naming the known models
    spec = BUILTINS[name]
    named = dict(module.named_parameters())
    names = list(named)
    manifest = _manifest(name, named, spec.input_shape, spec.num_classes)

    x = torch.zeros(TRACE_BATCH, *spec.input_shape)  # tracing only needs shapes and dtypes
    y = torch.zeros(TRACE_BATCH, dtype=torch.int64)
    params = tuple(p.detach() for p in named.values())

    def loss_of(param_values: tuple[torch.Tensor, ...], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = torch.func.functional_call(module, dict(zip(names, param_values, strict=True)), (x,))
        return spec.loss(logits, y)

    grad_and_loss = torch.func.grad_and_value(loss_of)

    def train_step(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grads, loss = grad_and_loss(flat[:-2], flat[-2], flat[-1])
        return (loss, *grads)

    def infer(*flat: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(names, flat[:-1], strict=True)), (flat[-1],))

    train_graph = make_fx(train_step, tracing_mode="symbolic", decomposition_table=training_decompositions())(
        *params, x, y
    )
    infer_graph = make_fx(infer, tracing_mode="symbolic", decomposition_table=training_decompositions())(
        *params, x
    )
    train = _to_onnx(
        train_graph,
        (*params, x, y),
        input_names=[*names, manifest.x_name, manifest.y_name],
        output_names=[manifest.loss_name, *manifest.grad_names],
        batched=(len(names), len(names) + 1),
    )
    infer_model = _to_onnx(
        infer_graph,
        (*params, x),
        input_names=[*names, manifest.x_name],
        output_names=[manifest.logits_name],
        batched=(len(names),),
    )
    init = np.concatenate([p.numpy().astype("<f4").ravel() for p in params])
    return Bundle(manifest, train, infer_model, init).save(out_dir)


def export_all(out_root: str | Path = BUILTIN_DIR, names: Sequence[str] = (), *, seed: int = 0) -> list[Path]:
    """Export every built-in (or ``names``) into ``out_root/<name>/``."""
    return [export_bundle(n, Path(out_root) / n, seed=seed) for n in (names or list(BUILTINS))]


def grad_name(param: str) -> str:
    """The training graph's output name for a parameter's gradient."""
    return f"grad.{param}"


def _manifest(
    name: str, named: dict[str, torch.Tensor], input_shape: tuple[int, ...], num_classes: int
) -> Manifest:
    specs, offset = [], 0
    for pname, p in named.items():
        specs.append(ParamSpec(name=pname, shape=tuple(p.shape), offset=offset))
        offset += p.numel()
    manifest = Manifest(
        name=name,
        params=tuple(specs),
        input_shape=input_shape,
        num_classes=num_classes,
        grad_names=tuple(grad_name(p) for p in named),
    )
    manifest.validate()
    return manifest


def _to_onnx(
    graph: torch.fx.GraphModule,
    args: tuple[torch.Tensor, ...],
    *,
    input_names: list[str],
    output_names: list[str],
    batched: tuple[int, ...],
) -> bytes:
    """One self-contained ONNX model (no ``.onnx.data`` side file), inputs and outputs renamed."""
    batch = Dim("batch", min=1)
    dynamic = tuple({0: batch} if i in batched else None for i in range(len(args)))
    graph.eval()  # a GraphModule has no dropout or batch norm; this only silences the exporter's warning
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        torch.onnx.export(
            graph,
            args,
            str(path),
            dynamo=True,
            opset_version=OPSET,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic,
            optimize=True,
            verbose=False,
        )
        model = onnx.load(str(path), load_external_data=True)
    for tensor in model.graph.initializer:
        tensor.ClearField("data_location")
        del tensor.external_data[:]
    onnx.checker.check_model(model, full_check=True)
    return drop_offset_pools(model).SerializeToString()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"models (default: all of {sorted(BUILTINS)})"
    )
    parser.add_argument("--out", type=Path, default=BUILTIN_DIR, help="output root (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(BUILTINS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(sorted(BUILTINS))}")
    for path in export_all(args.out, args.names, seed=args.seed):
        print(f"{path}: {', '.join(f'{f.name} {f.stat().st_size} B' for f in sorted(path.iterdir()))}")


if __name__ == "__main__":
    main()
