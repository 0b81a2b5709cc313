"""Export a torch model (built-in or your own) to a bundle: train graph (loss + gradients), infer graph, init,
and, when its layers allow per-example gradients, the DP-SGD graph (models/dp_export.py).

The joint forward+backward is traced with ``make_fx(grad_and_value(...))`` and exported with the dynamo
ONNX exporter, because torch.export cannot export a module that calls autograd itself; the result runs
in plain onnxruntime (onnxruntime-training is frozen at 1.19 and not used).

Usage: ``python -m models.export [--out DIR] [NAME...]`` (default: every built-in into models/artifacts).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import logging
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch.export import Dim
from torch.fx.experimental.proxy_tensor import make_fx

from models.check import check_bundle
from models.decompositions import training_decompositions
from models.dp_export import dp_grad_name, dp_step_function, max_dp_error, trace_batch, warn_no_dp_graph
from models.graph_rewrite import drop_offset_pools
from models.manifest import BUILTIN_DIR, Bundle, Manifest, ParamSpec
from models.zoo import BUILTINS, build, mean_cross_entropy

OPSET = 18
TRACE_BATCH = 4  # any size > 1 so the batch dimension is not specialised
GRADIENT_TOLERANCE = 1e-5  # max absolute error of loss, gradients and logits against torch autograd


def export_bundle(name: str, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Export built-in ``name`` into ``out_dir`` (the four bundle files) and return that directory."""
    module = build(name, seed=seed)  # raises KeyError naming the known models
    spec = BUILTINS[name]
    return export_module(
        module,
        out_dir,
        name=name,
        input_shape=spec.input_shape,
        num_classes=spec.num_classes,
        loss=spec.loss,
        learning_rate=spec.learning_rate,
        max_step=spec.max_step,
    )


def export_module(
    module: torch.nn.Module,
    out_dir: str | Path,
    *,
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = mean_cross_entropy,
    tolerance: float = GRADIENT_TOLERANCE,
    learning_rate: float | None = None,
    max_step: float | None = None,
) -> Path:
    """Export any torch classifier made of supported layers to a bundle in ``out_dir``; return ``out_dir``.

    Supported: Linear, Conv1d/2d, max/avg pooling, the usual activations, GroupNorm/LayerNorm, BatchNorm
    (exported in eval mode: running statistics become constants), Dropout (off). The module is put in
    eval mode; its trainable parameters, in ``named_parameters()`` order, are the manifest's parameters.
    ``loss(logits, y)`` must average over the batch (the coordinator's learning rate assumes a mean).
    Before anything is written, the exported graphs are run on a random batch and their loss, every
    gradient and the logits must agree with torch autograd to ``tolerance`` (max absolute error), and the
    bundle must pass the coordinator's own check (models/check.py); a ``ValueError`` says what differs.
    The DP graph (``dp_train.onnx``) is added only if every trainable parameter sits in a Linear/Conv layer
    and its clipped sums agree with a per-example autograd loop; otherwise a warning says why it is absent.
    """
    module = module.eval()
    input_shape = tuple(int(d) for d in input_shape)
    named = {k: p for k, p in module.named_parameters() if p.requires_grad}
    if not named:
        raise ValueError("the module has no trainable parameters")
    names = list(named)
    manifest = _manifest(name, named, input_shape, num_classes)
    manifest = dataclasses.replace(manifest, learning_rate=learning_rate, max_step=max_step)

    x = torch.zeros(TRACE_BATCH, *input_shape)  # tracing only needs shapes and dtypes
    y = torch.zeros(TRACE_BATCH, dtype=torch.int64)
    params = tuple(p.detach() for p in named.values())
    # Frozen parameters and float buffers (BatchNorm's running statistics) are traced as inputs, then baked
    # into the graphs as constants: traced as constants they would pin the batch dimension.
    buffers = {k: p.detach() for k, p in module.named_parameters() if not p.requires_grad}
    buffers.update((k, b.detach()) for k, b in module.named_buffers() if b.is_floating_point())
    buffer_inputs = [f"buffer.{k}" for k in buffers]
    state_names = [*names, *buffers]
    constants = {i: b.numpy() for i, b in zip(buffer_inputs, buffers.values(), strict=True)}
    n_state = len(state_names)

    def logits_of(state: tuple[torch.Tensor, ...], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(state_names, state, strict=True)), (x,))

    def loss_of(
        param_values: tuple[torch.Tensor, ...],
        buffer_values: tuple[torch.Tensor, ...],
        x: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        return loss(logits_of((*param_values, *buffer_values), x), y)

    grad_and_loss = torch.func.grad_and_value(loss_of)  # gradients of the parameters only

    def train_step(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grads, loss = grad_and_loss(flat[: len(names)], flat[len(names) : n_state], flat[-2], flat[-1])
        return (loss, *grads)

    def infer(*flat: torch.Tensor) -> torch.Tensor:
        return logits_of(flat[:-1], flat[-1])

    state = (*params, *buffers.values())
    train = _to_onnx(
        _trace(train_step)(*state, x, y),
        (*state, x, y),
        input_names=[*names, *buffer_inputs, manifest.x_name, manifest.y_name],
        output_names=[manifest.loss_name, *manifest.grad_names],
        batched=(n_state, n_state + 1),
        constants=constants,
    )
    infer_model = _to_onnx(
        _trace(infer)(*state, x),
        (*state, x),
        input_names=[*names, *buffer_inputs, manifest.x_name],
        output_names=[manifest.logits_name],
        batched=(n_state,),
        constants=constants,
    )
    init = np.concatenate([p.numpy().astype("<f4").ravel() for p in params])
    bundle = Bundle(manifest, train, infer_model, init)
    error = max_error_against_autograd(bundle, module, loss)
    if not error <= tolerance:
        raise ValueError(f"exported graphs differ from torch autograd by {error:.2e} > {tolerance:.0e}")
    bundle = _with_dp_graph(bundle, module, loss, state_names, state, constants, tolerance)
    check_bundle(bundle)
    return bundle.save(out_dir)


def _with_dp_graph(
    bundle: Bundle,
    module: torch.nn.Module,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    state_names: list[str],
    state: tuple[torch.Tensor, ...],
    constants: dict[str, np.ndarray],
    tolerance: float,
) -> Bundle:
    """``bundle`` plus the DP graph if one can be exported and matches a per-example loop, else ``bundle``
    unchanged and a warning: a model without a DP graph still trains, only DP tasks are refused for it."""
    manifest = bundle.manifest
    names = [p.name for p in manifest.params]
    step = dp_step_function(module, names, state_names, manifest.input_shape, loss)
    if isinstance(step, str):
        warn_no_dp_graph(manifest.name, step)
        return bundle
    dp_manifest = dataclasses.replace(manifest, dp_grad_names=tuple(dp_grad_name(p) for p in names))
    n_state = len(state_names)
    batch = trace_batch(module, manifest.input_shape)  # not TRACE_BATCH: that may pin the batch here
    args = (*state, torch.zeros(batch, *manifest.input_shape), torch.zeros(batch, dtype=torch.int64))
    args = (*args, torch.ones(()))  # clip
    buffer_inputs = [f"buffer.{k}" for k in state_names[len(names) :]]
    try:
        dp_onnx = _to_onnx(
            _trace(step)(*args),
            args,
            input_names=[*names, *buffer_inputs, manifest.x_name, manifest.y_name, dp_manifest.clip_name],
            output_names=[manifest.loss_name, *dp_manifest.dp_grad_names],
            batched=(n_state, n_state + 1),
            constants=constants,
        )
    except Exception as exc:  # the exporter raises many types; the model still gets its train graph
        warn_no_dp_graph(manifest.name, f"the exporter failed: {str(exc).strip().splitlines()[-1][:300]}")
        return bundle
    dp_bundle = dataclasses.replace(bundle, manifest=dp_manifest, dp_onnx=dp_onnx)
    error = max_dp_error(dp_bundle, module, loss)
    if not error <= tolerance:
        reason = f"clipped sums differ from a per-example loop by {error:.2e} (does it mix examples?)"
        warn_no_dp_graph(manifest.name, reason)
        return bundle
    return dp_bundle


def max_error_against_autograd(
    bundle: Bundle,
    module: torch.nn.Module,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    batches: Sequence[int] = (1, 7),
    seed: int = 0,
) -> float:
    """Largest absolute difference between the bundle's graphs (onnxruntime) and torch autograd.

    Compared: the loss, every gradient and the logits at the bundle's initial parameters, on random
    batches of each size in ``batches`` (a wrong mean-loss normaliser is invisible at batch 1 alone)."""
    import onnxruntime as ort

    m = bundle.manifest
    train = ort.InferenceSession(bundle.train_onnx, providers=["CPUExecutionProvider"])
    infer = ort.InferenceSession(bundle.infer_onnx, providers=["CPUExecutionProvider"])
    named = {k: p for k, p in module.named_parameters() if p.requires_grad}
    params = m.split(bundle.init_params)
    rng = np.random.default_rng(seed)
    errors: list[float] = []
    for n in batches:
        x = rng.standard_normal((n, *m.input_shape)).astype(np.float32)
        y = rng.integers(0, m.num_classes, size=n, dtype=np.int64)
        logits = module(torch.from_numpy(x))
        value = loss(logits, torch.from_numpy(y))
        grads = torch.autograd.grad(value, [named[p.name] for p in m.params])
        got_loss, *got_grads = train.run([m.loss_name, *m.grad_names], {**params, m.x_name: x, m.y_name: y})
        (got_logits,) = infer.run([m.logits_name], {**params, m.x_name: x})
        errors.append(abs(float(got_loss) - float(value.detach())))
        errors.append(float(np.abs(got_logits - logits.detach().numpy()).max()))
        for got, expected in zip(got_grads, grads, strict=True):
            errors.append(float(np.abs(got - expected.numpy()).max()))
    return max(errors)


def load_factory(spec: str) -> Callable[[], torch.nn.Module]:
    """``"pkg.mod:Factory"`` → the callable (a module class or a function) that builds the model."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected 'package.module:Factory', got {spec!r}")
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable")
    return target  # type: ignore[return-value]


def build_from_factory(factory: Callable[[], torch.nn.Module], *, seed: int = 0) -> torch.nn.Module:
    """Call ``factory()`` with torch's generator seeded, so the initial parameters are reproducible."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = factory()
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"the factory returned {type(module).__name__}, not a torch.nn.Module")
    return module


def export_all(out_root: str | Path = BUILTIN_DIR, names: Sequence[str] = (), *, seed: int = 0) -> list[Path]:
    """Export every built-in (or ``names``) into ``out_root/<name>/``."""
    return [export_bundle(n, Path(out_root) / n, seed=seed) for n in (names or list(BUILTINS))]


def grad_name(param: str) -> str:
    """The training graph's output name for a parameter's gradient."""
    return f"grad.{param}"


def _trace(function: Callable[..., object]) -> Callable[..., torch.fx.GraphModule]:
    """``make_fx`` with a symbolic batch; buffers (BatchNorm's running statistics) become constants."""
    return make_fx(
        function,
        tracing_mode="symbolic",
        decomposition_table=training_decompositions(),
        _allow_non_fake_inputs=True,
    )


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


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's known noise (torchvision ops it skips, deprecations inside torch, a
    dynamic-axis rename notice); anything else it says still shows."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning
            )
            warnings.filterwarnings(
                "ignore", message=r"# The axis name: .* will not be used", category=UserWarning
            )
            yield
    finally:
        registration.setLevel(level)


def _to_onnx(
    graph: torch.fx.GraphModule,
    args: tuple[torch.Tensor, ...],
    *,
    input_names: list[str],
    output_names: list[str],
    batched: tuple[int, ...],
    constants: dict[str, np.ndarray] | None = None,
) -> bytes:
    """One self-contained ONNX model (no ``.onnx.data`` side file), inputs and outputs renamed.

    Inputs named in ``constants`` become initializers holding those values."""
    batch = Dim("batch", min=1)
    dynamic = tuple({0: batch} if i in batched else None for i in range(len(args)))
    graph.eval()  # a GraphModule has no dropout or batch norm; this only silences the exporter's warning
    with tempfile.TemporaryDirectory() as tmp, _quiet_exporter():
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
    if constants:
        kept = [i for i in model.graph.input if i.name not in constants]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
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
