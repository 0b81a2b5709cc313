"""The DP-SGD graph ``dp_train.onnx``: each example's gradient clipped to global L2 norm ``clip``, summed.

``vmap`` over the batch cannot be used: traced symbolically it pins the batch to the traced size. Instead a
zero "probe" is added to every Linear/Conv output; the gradient of the *summed* loss with respect to a probe
is each example's own dL_i/dz_i, and each example's weight gradient follows from its layer input by einsum
(Linear) or unfold + einsum (Conv), as opacus computes them. Layers whose parameters this cannot handle
(BatchNorm, LayerNorm, embeddings, a parameter used outside its layer, a layer called twice) get no DP
graph: the manifest then has no ``dp_grad_names`` and the bundle no ``dp_train.onnx``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fleet_protocol.manifest import Bundle

log = logging.getLogger("fleet.models")

SUPPORTED = (nn.Linear, nn.Conv1d, nn.Conv2d)
ANALYSIS_BATCH = 2
TRACE_BATCH_FROM = 13  # the DP graph is traced at the first batch size from here that no layer uses


def dp_grad_name(param: str) -> str:
    """The DP graph's output name for a parameter's summed clipped gradient."""
    return f"dp_grad.{param}"


@dataclass(frozen=True)
class _Layer:
    """One Linear/Conv layer whose parameters get per-example gradients."""

    name: str  # the module's qualified name
    module: nn.Module
    out_shape: tuple[int, ...]  # one example's output shape (the probe's shape after the batch)
    positions: int  # L: rows per example in the (L, I) x (L, O) per-example product
    strategy: str  # "outer" (L = 1), "ghost" (L*L Gram matrices) or "materialize" (per-example O x I)


def trace_batch(module: nn.Module, input_shape: tuple[int, ...]) -> int:
    """A batch size to trace the DP graph with that equals no size inside the model.

    Symbolic tracing gives equal sizes one symbol ("duck sizing"), so a batch of 4 traced through a layer
    with 4 channels or 4 positions is pinned to 4 by the first reshape that uses that size."""
    sizes = {int(d) for d in input_shape} | {int(d) for p in module.parameters() for d in p.shape}

    def record(_: nn.Module, __: object, output: object) -> None:
        if isinstance(output, torch.Tensor):
            sizes.update(int(d) for d in output.shape[1:])

    handles = [sub.register_forward_hook(record) for sub in module.modules()]
    try:
        with torch.no_grad():
            module(torch.zeros(ANALYSIS_BATCH, *input_shape))
    finally:
        for handle in handles:
            handle.remove()
    return next(n for n in range(TRACE_BATCH_FROM, TRACE_BATCH_FROM + 10_000) if n not in sizes)


def _owners(module: nn.Module, names: Sequence[str]) -> dict[str, nn.Module] | str:
    """The Linear/Conv layers (by qualified name) holding the parameters ``names``, or why there are none."""
    owner: dict[str, tuple[str, nn.Module]] = {}
    for prefix, sub in module.named_modules():
        for pname, _ in sub.named_parameters(recurse=False):
            owner[f"{prefix}.{pname}" if prefix else pname] = (prefix, sub)
    for name in names:
        prefix, sub = owner[name]
        if not isinstance(sub, SUPPORTED):
            kind = type(sub).__name__
            return f"parameter {name!r} belongs to a {kind} (per-example gradients: Linear/Conv only)"
        if isinstance(sub, nn.Conv1d | nn.Conv2d) and sub.padding_mode != "zeros":
            return f"{prefix!r} pads with {sub.padding_mode!r} (only zero padding is supported)"
    return {owner[n][0]: owner[n][1] for n in names}


def _layers(module: nn.Module, names: Sequence[str], input_shape: tuple[int, ...]) -> list[_Layer] | str:
    """The layers carrying the trainable parameters ``names``, or why no DP graph can be built.

    One eager forward pass records each layer's shapes, which fix the cheapest way to get its norms."""
    candidates = _owners(module, names)
    if isinstance(candidates, str):
        return candidates
    calls: dict[str, list[tuple[torch.Size, torch.Size]]] = {p: [] for p in candidates}

    def recorder(prefix: str) -> Callable[..., None]:
        def hook(_: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            calls[prefix].append((inputs[0].shape, output.shape))

        return hook

    handles = [sub.register_forward_hook(recorder(p)) for p, sub in candidates.items()]
    try:
        with torch.no_grad():
            module(torch.zeros(ANALYSIS_BATCH, *input_shape))
    finally:
        for handle in handles:
            handle.remove()
    layers = []
    for prefix, sub in candidates.items():
        if len(calls[prefix]) != 1:
            return f"layer {prefix!r} runs {len(calls[prefix])} times per forward pass (must be once)"
        in_shape, out_shape = calls[prefix][0]
        if in_shape[0] != ANALYSIS_BATCH or out_shape[0] != ANALYSIS_BATCH:
            return f"layer {prefix!r} does not keep the batch as its first dimension"
        if isinstance(sub, nn.Linear):
            positions, size = int(np.prod(out_shape[1:-1])), sub.in_features * sub.out_features
        else:
            positions = int(np.prod(out_shape[2:]))
            size = sub.in_channels * sub.out_channels // sub.groups**2 * int(np.prod(sub.kernel_size))
        strategy = "outer" if positions == 1 else "ghost" if positions**2 <= size else "materialize"
        layers.append(_Layer(prefix, sub, tuple(out_shape[1:]), positions, strategy))
    return layers


def _rows(layer: _Layer, act: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example layer inputs A (B, g, L, I) and output gradients G (B, g, L, O) with W_i = G_i^T A_i."""
    batch, sub = act.shape[0], layer.module
    if isinstance(sub, nn.Linear):
        a = act.reshape(batch, 1, layer.positions, sub.in_features)
        return a, grad.reshape(batch, 1, layer.positions, sub.out_features)
    assert isinstance(sub, nn.Conv1d | nn.Conv2d)
    kernel, stride, dilation = list(sub.kernel_size), list(sub.stride), list(sub.dilation)
    if isinstance(sub.padding, str):  # "same" may pad unevenly: pad first, then unfold without padding
        act, padding = F.pad(act, sub._reversed_padding_repeated_twice), [0] * len(kernel)
    else:
        padding = list(sub.padding)
    if isinstance(sub, nn.Conv1d):  # unfold is 2-d only: a 1-d convolution is a 2-d one of height 1
        act = act.unsqueeze(2)
        kernel, stride, dilation, padding = [1, *kernel], [1, *stride], [1, *dilation], [0, *padding]
    columns = F.unfold(act, kernel, dilation=dilation, padding=padding, stride=stride)  # (B, C*k, L)
    groups = sub.groups
    a = columns.reshape(batch, groups, -1, layer.positions).transpose(2, 3)
    g = grad.reshape(batch, groups, sub.out_channels // groups, layer.positions).transpose(2, 3)
    return a, g


def _clipped_sums(
    layers: list[_Layer], acts: dict[str, torch.Tensor], grads: Sequence[torch.Tensor], clip: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per-example squared norms layer by layer, the clip factor min(1, C/‖g_i‖), then the weighted sums."""
    rows, norms, materialized = [], [], {}
    for layer, grad in zip(layers, grads, strict=True):
        a, g = _rows(layer, acts[layer.name], grad)
        rows.append((a, g))
        if layer.strategy == "outer":  # ‖g aᵀ‖² = ‖g‖²‖a‖² per group
            norms.append((a.square().sum((2, 3)) * g.square().sum((2, 3))).sum(1))
        elif layer.strategy == "ghost":  # ‖Gᵀ A‖² = Σ_{l,m} (A Aᵀ)_{lm} (G Gᵀ)_{lm}
            gram_a = torch.einsum("bgli,bgmi->bglm", a, a)
            gram_g = torch.einsum("bglo,bgmo->bglm", g, g)
            norms.append((gram_a * gram_g).sum((1, 2, 3)))
        else:
            materialized[layer.name] = torch.einsum("bglo,bgli->bgoi", g, a)
            norms.append(materialized[layer.name].square().sum((1, 2, 3)))
        if layer.module.bias is not None:
            norms.append(g.sum(2).square().sum((1, 2)))
    norm = torch.stack(norms).sum(0).sqrt()
    factor = clip / torch.maximum(norm, clip)  # = min(1, C/‖g_i‖), and 1 for a zero gradient
    sums: dict[str, torch.Tensor] = {}
    for layer, (a, g) in zip(layers, rows, strict=True):
        weight = layer.module.weight
        if layer.name in materialized:
            summed = torch.einsum("b,bgoi->goi", factor, materialized[layer.name])
        else:
            summed = torch.einsum("bglo,bgli->goi", g * factor[:, None, None, None], a)
        prefix = f"{layer.name}." if layer.name else ""
        sums[f"{prefix}weight"] = summed.reshape(weight.shape)
        if layer.module.bias is not None:
            sums[f"{prefix}bias"] = torch.einsum("b,bgo->go", factor, g.sum(2)).reshape(-1)
    return sums


def dp_step_function(
    module: nn.Module,
    names: Sequence[str],
    state_names: Sequence[str],
    input_shape: tuple[int, ...],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> Callable[..., tuple[torch.Tensor, ...]] | str:
    """``step(*state, x, y, clip) -> (mean loss, *clipped sums in names order)``, or why there is none.

    ``loss`` averages over the batch, so batch size x loss is the sum of the examples' own losses, whose
    gradient with respect to a probe is each example's own dL_i/dz_i (not 1/B of it)."""
    layers = _layers(module, names, input_shape)
    if isinstance(layers, str):
        return layers
    n_state = len(state_names)

    def step(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        state = dict(zip(state_names, flat[:n_state], strict=True))
        x, y, clip = flat[n_state:]
        batch = x.shape[0]
        probes = tuple(x.new_zeros((batch, *layer.out_shape)) for layer in layers)

        def summed_loss(
            probes: tuple[torch.Tensor, ...],
        ) -> tuple[torch.Tensor, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
            acts: dict[str, torch.Tensor] = {}

            def probe_hook(layer: _Layer, probe: torch.Tensor) -> Callable[..., torch.Tensor]:
                def hook(_: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
                    acts[layer.name] = inputs[0]
                    return out + probe

                return hook

            handles = [
                layer.module.register_forward_hook(probe_hook(layer, probe))
                for layer, probe in zip(layers, probes, strict=True)
            ]
            try:
                mean = loss(torch.func.functional_call(module, state, (x,)), y)
            finally:
                for handle in handles:
                    handle.remove()
            return mean * batch, (mean, acts)

        grads, (mean, acts) = torch.func.grad(summed_loss, has_aux=True)(probes)
        sums = _clipped_sums(layers, acts, grads, clip)
        return (mean, *(sums[n] for n in names))

    return step


def per_example_gradients(
    module: nn.Module,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    names: Sequence[str],
    x: np.ndarray,
    y: np.ndarray,
) -> list[list[np.ndarray]]:
    """Each example's own gradient (float64, ``names`` order) by the obvious slow route: one autograd each."""
    named = dict(module.named_parameters())
    params = [named[n] for n in names]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    return [
        [g.double().numpy() for g in torch.autograd.grad(loss(module(xt[i : i + 1]), yt[i : i + 1]), params)]
        for i in range(len(y))
    ]


def clip_and_sum(per_example: list[list[np.ndarray]], clip: float) -> list[np.ndarray]:
    """Σ_i g_i · min(1, C/‖g_i‖), the norm taken over all parameters of example i (the DP graph's job)."""
    sums = [np.zeros_like(g) for g in per_example[0]]
    for grads in per_example:
        norm = float(np.sqrt(sum(np.square(g).sum() for g in grads)))
        factor = min(1.0, clip / norm) if norm > 0 else 1.0
        for total, g in zip(sums, grads, strict=True):
            total += factor * g
    return sums


def max_dp_error(
    bundle: Bundle,
    module: nn.Module,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    batches: Sequence[int] = (1, 7),
    seed: int = 0,
) -> float:
    """Largest absolute difference between ``dp_train.onnx`` (onnxruntime) and a per-example autograd loop.

    The clip is the median per-example gradient norm, so some examples are clipped and some are not."""
    import onnxruntime as ort

    assert bundle.dp_onnx is not None
    m = bundle.manifest
    session = ort.InferenceSession(bundle.dp_onnx, providers=["CPUExecutionProvider"])
    params = m.split(bundle.init_params)
    names = [p.name for p in m.params]
    rng = np.random.default_rng(seed)
    errors: list[float] = []
    for n in batches:
        x = rng.standard_normal((n, *m.input_shape)).astype(np.float32)
        y = rng.integers(0, m.num_classes, size=n, dtype=np.int64)
        per_example = per_example_gradients(module, loss, names, x, y)
        norms = [float(np.sqrt(sum(np.square(g).sum() for g in grads))) for grads in per_example]
        clip = float(np.median(norms)) * (0.5 if n == 1 else 1.0)  # batch 1: clip its only example
        expected = clip_and_sum(per_example, clip)
        with torch.no_grad():
            expected_loss = float(loss(module(torch.from_numpy(x)), torch.from_numpy(y)))
        feeds = {**params, m.x_name: x, m.y_name: y, m.clip_name: np.array(clip, dtype=np.float32)}
        got_loss, *got = session.run([m.loss_name, *m.dp_grad_names], feeds)
        errors.append(abs(float(got_loss) - expected_loss))
        errors += [float(np.abs(g - e).max()) for g, e in zip(got, expected, strict=True)]
    return max(errors)


def warn_no_dp_graph(name: str, reason: str) -> None:
    """Say (once per export) why a model got no DP graph: DP tasks will be refused for it."""
    log.warning("%s: no DP-SGD graph (dp_train.onnx): %s", name, reason)
