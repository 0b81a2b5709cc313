"""The hand-written convolution_backward must equal aten's, since exported conv gradients rest on it."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from models.decompositions import convolution_backward, training_decompositions  # noqa: E402

aten = torch.ops.aten

CASES = [
    # (spatial dims, input size, kernel, stride, padding, dilation, groups)
    *((2, (28, 28), (5, 5), 1, 0, 1, 1),),
    *(
        (2, (11, 9), (3, 2), stride, padding, dilation, groups)
        for stride, padding, dilation, groups in itertools.product((1, 2, 3), (0, 1, 2), (1, 2), (1, 2, 4))
    ),
    (2, (10, 13), (3, 3), (2, 1), (1, 0), (1, 2), 3),
    (1, (17,), (4,), 3, 1, 2, 2),
    (3, (7, 6, 5), (3, 2, 2), 2, 1, 1, 2),
]


def _case_id(case: tuple) -> str:
    dims, size, kernel, stride, padding, dilation, groups = case
    return f"{dims}d-in{size}-k{kernel}-s{stride}-p{padding}-d{dilation}-g{groups}"


def _per_dim(value: int | tuple[int, ...], dims: int) -> list[int]:
    return list(value) if isinstance(value, tuple) else [value] * dims


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_aten_convolution_backward(case: tuple) -> None:
    dims, size, kernel, stride, padding, dilation, groups = case
    stride, padding, dilation = (_per_dim(v, dims) for v in (stride, padding, dilation))
    gen = torch.Generator().manual_seed(0)
    in_channels, out_channels = 2 * groups, 3 * groups
    x = torch.randn(3, in_channels, *size, generator=gen, dtype=torch.float64)
    w = torch.randn(out_channels, in_channels // groups, *kernel, generator=gen, dtype=torch.float64)
    out = aten.convolution(x, w, None, stride, padding, dilation, False, [0] * dims, groups)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    args = (grad_out, x, w, [out_channels], stride, padding, dilation, False, [0] * dims, groups)

    expected = aten.convolution_backward(*args, [True, True, True])
    got = convolution_backward(*args, [True, True, True])
    for name, e, g in zip(("grad_input", "grad_weight", "grad_bias"), expected, got, strict=True):
        assert g.shape == e.shape, name
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10, msg=name)


def test_output_mask_skips_unrequested_gradients() -> None:
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    grad_out = torch.randn(2, 4, 6, 6)
    got = convolution_backward(grad_out, x, w, None, [1], [0], [1], False, [0], 1, [False, True, False])
    assert got[0] is None and got[2] is None
    expected = aten.convolution_backward(
        grad_out, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, False]
    )
    torch.testing.assert_close(got[1], expected[1])


def test_transposed_convolution_is_left_to_aten() -> None:
    x, w = torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3, 3)
    assert convolution_backward(x, x, w, None, [1], [0], [1], True, [0], 1, [True] * 3) is NotImplemented


def test_traced_cnn_gradient_has_no_convolution_backward() -> None:
    """With the table, a traced conv gradient holds only forward convolutions, which ONNX can express."""
    from torch.fx.experimental.proxy_tensor import make_fx

    conv = torch.nn.Conv2d(2, 4, 3, stride=2, padding=1)
    params = dict(conv.named_parameters())

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(conv, p, (x,)).square().mean()

    graph = make_fx(
        torch.func.grad(loss), tracing_mode="symbolic", decomposition_table=training_decompositions()
    )({k: v.detach() for k, v in params.items()}, torch.randn(3, 2, 9, 9))
    targets = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    assert not any("convolution_backward" in t for t in targets)
    assert any("convolution" in t for t in targets)
