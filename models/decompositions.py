"""Decompositions that let a traced forward+backward graph export to ONNX that plain onnxruntime runs.

Neither torch nor the ONNX exporter decomposes ``aten.convolution_backward``, so it is written here in
terms of forward convolutions, which the exporter does know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten


def convolution_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: Sequence[int] | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``aten.convolution_backward`` for non-transposed N-d convolutions, as forward convolutions.

    grad_input is the transposed convolution of grad_output with the weight; grad_weight correlates the
    input with grad_output (batch and channel axes swapped, one group per convolution group), cropped to
    the kernel size; grad_bias sums grad_output over batch and space.
    """
    if transposed:
        return NotImplemented
    spatial = weight.shape[2:]
    dims = len(spatial)
    stride, padding, dilation = _expand(stride, dims), _expand(padding, dims), _expand(dilation, dims)
    grad_input = grad_weight = grad_bias = None

    if output_mask[0]:
        # A transposed convolution reaches (out - 1)s - 2p + d(k - 1) + 1 <= in: pad the rest (< s).
        reach = [
            (grad_output.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (spatial[i] - 1) + 1
            for i in range(dims)
        ]
        extra = [input.shape[2 + i] - reach[i] for i in range(dims)]
        grad_input = aten.convolution(
            grad_output, weight, None, stride, padding, dilation, True, extra, groups
        )

    if output_mask[1]:
        batch, in_channels = input.shape[:2]
        in_per_group = in_channels // groups
        # input (N, G*Ci, ...) -> (Ci, G*N, ...): Ci becomes the batch, each group sees its own N channels.
        inp = input.reshape(batch, groups, in_per_group, *input.shape[2:])
        inp = inp.transpose(0, 2).reshape(in_per_group, groups * batch, *input.shape[2:])
        # grad_output (N, G*Co, ...) -> (G*Co, N, ...): one filter of N channels per output channel.
        kernel = grad_output.transpose(0, 1)
        correlated = aten.convolution(
            inp, kernel, None, dilation, padding, stride, False, [0] * dims, groups
        )  # (Ci, G*Co, k' ...) with k' >= k
        grad_weight = correlated.transpose(0, 1)[(slice(None), slice(None), *(slice(0, k) for k in spatial))]

    if output_mask[2]:
        grad_bias = grad_output.sum(dim=[0, *range(2, 2 + dims)])

    return grad_input, grad_weight, grad_bias


def avg_pool2d_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """``aten.avg_pool2d_backward`` as a depthwise transposed convolution with a constant kernel.

    Every output cell spreads its gradient evenly over its window, which is what a transposed convolution
    with weight ``1/divisor`` does. Only a constant divisor is written this way (no ``ceil_mode``, and
    padding only if it counts in the divisor); other cases stay undecomposed and the export says so.
    """
    kernel = _expand(kernel_size, 2)
    stride = _expand(stride, 2) if len(stride) else kernel
    padding = _expand(padding, 2)
    if ceil_mode or (any(padding) and not count_include_pad and divisor_override is None):
        return NotImplemented
    divisor = divisor_override or kernel[0] * kernel[1]
    channels = input.shape[1]
    weight = grad_output.new_full((channels, 1, *kernel), 1.0 / divisor)
    reach = [(grad_output.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + kernel[i] for i in range(2)]
    extra = [input.shape[2 + i] - reach[i] for i in range(2)]
    return aten.convolution(grad_output, weight, None, stride, padding, [1, 1], True, extra, channels)


def _expand(values: Sequence[int], dims: int) -> list[int]:
    """aten accepts a single value for every spatial dimension."""
    values = list(values)
    return values * dims if len(values) == 1 else values


def training_decompositions() -> dict[torch._ops.OperatorBase, Callable]:
    """The table for ``make_fx``: core aten (fixes nll_loss's total_weight), pooling and conv backward.

    Without the core aten decompositions the exporter writes ``nll_loss_forward``'s total_weight as the
    constant 1.0 and mean-loss gradients come out N times too large for every batch size but 1.
    """
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([aten.max_pool2d_with_indices_backward]))
    table[aten.convolution_backward.default] = convolution_backward
    table[aten.avg_pool2d_backward.default] = avg_pool2d_backward
    return table
