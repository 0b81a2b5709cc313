"""dp_train.onnx against the obvious slow route: torch autograd one example at a time, clipped, summed.

The graph's clipped sum must match that loop to 1e-5 at batch 1, 7 and 100, for both built-ins and for a
custom module exported through ``export_module`` (Conv1d, grouped and "same"-padded Conv2d, a Linear over
a sequence, each norm route of models/dp_export.py); models it cannot do get no DP graph at all.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest

from client import DPGradientSession, GradientSession
from fleet_protocol import DP_GRAPH_FILE, Bundle
from models.check import BundleError, check_bundle
from models.manifest import builtin

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from models.export import export_module  # noqa: E402
from models.zoo import BUILTINS, build, mean_cross_entropy  # noqa: E402

TOLERANCE = 1e-5
BATCHES = (1, 7, 100)


def reference(
    module: nn.Module, x: np.ndarray, y: np.ndarray, clip: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """(mean loss, Σ_i g_i·min(1, C/‖g_i‖), per-example norms), g_i the gradient of example i's own loss."""
    params = [p for p in module.parameters() if p.requires_grad]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    total = np.zeros(sum(p.numel() for p in params))
    norms = []
    for i in range(len(y)):
        loss_i = F.cross_entropy(module(xt[i : i + 1]), yt[i : i + 1])  # example i's own loss
        g = np.concatenate([t.double().numpy().ravel() for t in torch.autograd.grad(loss_i, params)])
        norms.append(np.linalg.norm(g))
        total += g * min(1.0, clip / norms[-1])
    with torch.no_grad():
        mean = float(F.cross_entropy(module(xt), yt))
    return mean, total, np.array(norms)


def batch(bundle: Bundle, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, *bundle.manifest.input_shape), dtype=np.float32)
    return x, rng.integers(0, bundle.manifest.num_classes, size=n, dtype=np.int64)


def tie_free_batch(bundle: Bundle, module: nn.Module, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random examples on which train.onnx and torch agree one by one.

    Dropped: the rare example (about 1 in 100 for the CNN) with two max-pooling candidates within float32
    rounding of each other, where torch and onnxruntime may route the gradient to different cells; the
    plain gradient graph differs from torch there just as much, so it says nothing about clipping."""
    plain = GradientSession(bundle.manifest, bundle.train_onnx)
    params = [p for p in module.parameters() if p.requires_grad]
    x, y = batch(bundle, 2 * n + 5, seed)
    keep = []
    for i in range(len(y)):
        loss_i = F.cross_entropy(module(torch.from_numpy(x[i : i + 1])), torch.from_numpy(y[i : i + 1]))
        g = np.concatenate([t.numpy().ravel() for t in torch.autograd.grad(loss_i, params)])
        _, got = plain.loss_and_gradient(bundle.init_params, x[i : i + 1], y[i : i + 1])
        if np.abs(got - g).max() < 1e-6:
            keep.append(i)
    assert len(keep) >= n
    return x[keep[:n]], y[keep[:n]]


def assert_matches_loop(bundle: Bundle, module: nn.Module, batches: tuple[int, ...] = BATCHES) -> None:
    session = DPGradientSession(bundle.manifest, bundle.dp_onnx)
    for n in batches:
        x, y = tie_free_batch(bundle, module, n, seed=n)
        _, _, norms = reference(module, x, y, np.inf)
        clip = float(np.median(norms)) * (0.5 if n == 1 else 1.0)  # some examples clipped, some not
        expected_loss, expected, _ = reference(module, x, y, clip)
        loss, got = session.clipped_sum(bundle.init_params, x, y, clip)
        assert abs(loss - expected_loss) < TOLERANCE, (n, loss, expected_loss)
        assert np.abs(got - expected).max() < TOLERANCE, (n, np.abs(got - expected).max())
        assert np.linalg.norm(got) <= n * clip * (1 + 1e-5)


@pytest.mark.slow  # a torch export or a benchmark run: the slow tier
@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtin_clipped_sum_equals_a_per_example_loop(name: str) -> None:
    bundle = builtin(name)
    assert bundle.manifest.dp_grad_names and bundle.dp_onnx is not None
    assert_matches_loop(bundle, build(name, seed=0))


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_huge_clip_leaves_gradients_unchanged(name: str) -> None:
    """No example is clipped: the sum is the plain (mean) gradient times the batch size."""
    bundle = builtin(name)
    dp = DPGradientSession(bundle.manifest, bundle.dp_onnx)
    plain = GradientSession(bundle.manifest, bundle.train_onnx)
    for n in BATCHES:
        x, y = batch(bundle, n, seed=100 + n)
        loss, summed = dp.clipped_sum(bundle.init_params, x, y, 1e9)
        plain_loss, gradient = plain.loss_and_gradient(bundle.init_params, x, y)
        assert loss == pytest.approx(plain_loss, abs=1e-6)
        np.testing.assert_allclose(summed, gradient * n, atol=1e-5 * n, rtol=1e-4)


class Custom(nn.Module):
    """Every route of models/dp_export.py: a grouped Conv2d with "same" padding (materialised per-example
    gradients), a bias-free Conv1d with stride and padding and a Linear over a sequence (both by Gram
    matrices, "ghost" norms), a final Linear (outer-product norms).

    The sequence Linear reads the input directly: fed from a convolution (through a transpose), its
    backward traces to ``as_strided_scatter``, which the ONNX exporter cannot write; such a model gets
    no DP graph (export_module warns), not a failed export."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding="same", groups=2)
        self.conv1d = nn.Conv1d(4, 6, 7, stride=25, padding=1, bias=False)
        self.seq = nn.Linear(50, 8)
        self.head = nn.Linear(24 + 32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = F.relu(self.conv(x)).flatten(2)  # (B, 4, 100)
        conv = torch.tanh(self.conv1d(conv)).flatten(1)  # (B, 6, 4) -> (B, 24)
        seq = x.reshape(x.shape[0], 50, 4).transpose(1, 2)  # (B, 4, 50); a plain reshape does not export
        seq = F.relu(self.seq(seq)).flatten(1)  # (B, 4, 8) -> (B, 32)
        return self.head(torch.cat([conv, seq], 1))


def _export(module: nn.Module, out: Path, input_shape: tuple[int, ...] = (2, 10, 10)) -> Bundle:
    torch.manual_seed(0)
    export_module(module, out, name="custom", input_shape=input_shape, num_classes=3, loss=mean_cross_entropy)
    return Bundle.load(out)


@pytest.mark.slow  # a torch export or a benchmark run: the slow tier
def test_custom_module_through_export_module(tmp_path: Path) -> None:
    torch.manual_seed(1)
    module = Custom().eval()
    bundle = _export(module, tmp_path)
    assert (tmp_path / DP_GRAPH_FILE).is_file()
    assert bundle.manifest.dp_grad_names == tuple(f"dp_grad.{n}" for n, _ in module.named_parameters())
    assert_matches_loop(bundle, module)


class WithBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.norm = nn.BatchNorm2d(3)
        self.head = nn.Linear(3 * 8 * 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.norm(self.conv(x))).flatten(1))


class MixesExamples(nn.Module):
    """Subtracts the batch mean: each example's output depends on the others, so no per-example gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(200, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        return self.fc(x - x.mean(0, keepdim=True))


class SequenceAfterConv(nn.Module):
    """A Linear over a convolution's transposed output: the exporter cannot write its probe graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(2, 6, 7, stride=25, padding=1)
        self.seq = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.conv1d(x.flatten(2))).transpose(1, 2)  # (B, 4, 6)
        return self.seq(x).mean(1)


@pytest.mark.parametrize(
    ("module", "reason"),
    [(WithBatchNorm, "BatchNorm2d"), (MixesExamples, "per-example"), (SequenceAfterConv, "exporter failed")],
)
@pytest.mark.slow  # a torch export or a benchmark run: the slow tier
def test_models_it_cannot_do_get_no_dp_graph(tmp_path: Path, caplog, module, reason: str) -> None:
    with caplog.at_level(logging.WARNING, logger="fleet.models"):
        bundle = _export(module(), tmp_path)
    assert bundle.dp_onnx is None and bundle.manifest.dp_grad_names == ()
    assert not (tmp_path / DP_GRAPH_FILE).exists()
    assert "no DP-SGD graph" in caplog.text and reason in caplog.text
    with pytest.raises(ValueError, match="no DP graph"):
        DPGradientSession(bundle.manifest, b"")


def _fake_dp_graph(bundle: Bundle) -> bytes:
    """train.onnx dressed up as a DP graph: a ``clip`` input it ignores, outputs renamed."""
    model = onnx.load_from_string(bundle.train_onnx)
    m = bundle.manifest
    model.graph.input.append(onnx.helper.make_tensor_value_info(m.clip_name, onnx.TensorProto.FLOAT, []))
    renamed = dict(zip(m.grad_names, m.dp_grad_names, strict=True))
    for node in model.graph.node:
        node.output[:] = [renamed.get(o, o) for o in node.output]
        node.input[:] = [renamed.get(i, i) for i in node.input]
    for output in model.graph.output:
        output.name = renamed.get(output.name, output.name)
    return model.SerializeToString()


def test_the_bundle_check_refuses_a_dp_graph_that_does_not_clip() -> None:
    mlp = builtin("mlp")
    check_bundle(mlp)
    with pytest.raises(BundleError, match="does not clip"):
        check_bundle(
            Bundle(mlp.manifest, mlp.train_onnx, mlp.infer_onnx, mlp.init_params, _fake_dp_graph(mlp))
        )
    with pytest.raises(BundleError, match="scalar float32 input 'clip'"):
        check_bundle(Bundle(mlp.manifest, mlp.train_onnx, mlp.infer_onnx, mlp.init_params, mlp.train_onnx))


def test_bundle_files_round_trip_with_and_without_the_dp_graph(tmp_path: Path) -> None:
    mlp = builtin("mlp")
    again = Bundle.from_files(mlp.files())
    assert again.dp_onnx == mlp.dp_onnx and again.manifest == mlp.manifest
    assert Bundle.load(mlp.save(tmp_path / "b")).dp_onnx == mlp.dp_onnx
    old = {k: v for k, v in mlp.files().items() if k != DP_GRAPH_FILE}  # a bundle from before DP
    import json

    manifest = json.loads(old["manifest.json"])
    for key in ("dp_grad_names", "clip_name"):
        del manifest[key]
    old["manifest.json"] = json.dumps(manifest).encode()
    legacy = Bundle.from_files(old)
    assert legacy.dp_onnx is None and legacy.manifest.dp_grad_names == ()
    assert Bundle.load(legacy.save(tmp_path / "b")).dp_onnx is None  # the stale dp_train.onnx is removed
    with pytest.raises(ValueError, match="no dp_train.onnx"):
        Bundle.from_files({k: v for k, v in mlp.files().items() if k != DP_GRAPH_FILE})
    with pytest.raises(ValueError, match="without dp_grad_names"):
        Bundle.from_files({**old, DP_GRAPH_FILE: mlp.dp_onnx})
