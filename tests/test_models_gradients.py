"""The committed bundles must compute what torch computes: loss, every gradient and the logits.

Devices and the server trust these graphs blindly, so they are checked against torch autograd at several
batch sizes (a wrong nll_loss normaliser is invisible at batch 1), and against a fresh export.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from models.manifest import BUNDLE_FILES, DP_GRAPH_FILE, Bundle, builtin

ort = pytest.importorskip("onnxruntime")

NAMES = ("mnist_cnn", "mlp", "recommender")
BATCHES = (1, 7, 100)
TOLERANCE = 1e-5
REPO = Path(__file__).resolve().parents[1]


def _session(model: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _batch(bundle: Bundle, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = bundle.manifest
    x = rng.standard_normal((n, *m.input_shape)).astype(np.float32)
    y = rng.integers(0, m.num_classes, size=n, dtype=np.int64)
    return x, y


def _torch_reference(
    bundle: Bundle, x: np.ndarray, y: np.ndarray
) -> tuple[float, list[np.ndarray], np.ndarray]:
    """Loss, gradients (manifest order) and logits from the torch module holding the bundle's params."""
    torch = pytest.importorskip("torch")
    from models.zoo import BUILTINS, build

    m = bundle.manifest
    module = build(m.name)
    params = {k: torch.from_numpy(v.copy()) for k, v in m.split(bundle.init_params).items()}
    module.load_state_dict(params, strict=True)
    logits = module(torch.from_numpy(x))
    loss = BUILTINS[m.name].loss(logits, torch.from_numpy(y))
    named = dict(module.named_parameters())
    grads = torch.autograd.grad(loss, [named[p.name] for p in m.params])
    return float(loss.detach()), [g.numpy() for g in grads], logits.detach().numpy()


def _train_outputs(bundle: Bundle, x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    m = bundle.manifest
    feed = {**m.split(bundle.init_params), m.x_name: x, m.y_name: y}
    return _session(bundle.train_onnx).run([m.loss_name, *m.grad_names], feed)


def _max_error(bundle: Bundle, x: np.ndarray, y: np.ndarray) -> float:
    loss, grads, _ = _torch_reference(bundle, x, y)
    outputs = _train_outputs(bundle, x, y)
    assert outputs[0].shape == ()
    errors = [abs(float(outputs[0]) - loss)]
    for spec, got, expected in zip(bundle.manifest.params, outputs[1:], grads, strict=True):
        assert got.shape == spec.shape == expected.shape
        errors.append(float(np.abs(got - expected).max()))
    return max(errors)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", NAMES)
def test_train_graph_matches_autograd(name: str, batch: int, record_property) -> None:
    bundle = builtin(name)
    x, y = _batch(bundle, batch, seed=batch)
    error = _max_error(bundle, x, y)
    record_property("max_abs_error", error)
    print(f"{name} batch {batch}: max abs error {error:.2e}")
    assert error <= TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_infer_graph_matches_module(name: str) -> None:
    bundle = builtin(name)
    m = bundle.manifest
    x, y = _batch(bundle, 13, seed=1)
    _, _, expected = _torch_reference(bundle, x, y)
    (logits,) = _session(bundle.infer_onnx).run([m.logits_name], {**m.split(bundle.init_params), m.x_name: x})
    assert logits.shape == (13, m.num_classes)
    np.testing.assert_allclose(logits, expected, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_bundle_matches_torch_module(name: str) -> None:
    """Manifest names/shapes are the module's parameters; init.bin is the module's seed-0 init."""
    pytest.importorskip("torch")
    from models.zoo import build

    bundle = builtin(name)
    module = build(name, seed=0)
    named = dict(module.named_parameters())
    assert [p.name for p in bundle.manifest.params] == list(named)
    assert [p.shape for p in bundle.manifest.params] == [tuple(t.shape) for t in named.values()]
    flat = np.concatenate([t.detach().numpy().ravel() for t in named.values()])
    # the artifact was made on another CPU: equal to a few ulps, not to the bit
    np.testing.assert_array_max_ulp(bundle.init_params, flat, maxulp=4)
    files = sorted(f.name for f in (REPO / "models" / "artifacts" / name).iterdir())
    assert files == sorted([*BUNDLE_FILES, DP_GRAPH_FILE])


def test_mnist_cnn_has_thesis_parameter_count() -> None:
    assert builtin("mnist_cnn").manifest.num_params == 11_786


@pytest.fixture(scope="module")
def fresh_bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from models.export import export_all

    root = tmp_path_factory.mktemp("bundles")
    export_all(root)
    return root


@pytest.mark.slow  # a torch export or a benchmark run: the slow tier
@pytest.mark.parametrize("name", NAMES)
def test_committed_artifacts_equal_fresh_export(name: str, fresh_bundles: Path) -> None:
    """Stale artifacts (model changed, export not rerun) fail here."""
    fresh = Bundle.load(fresh_bundles / name)
    committed = builtin(name)
    assert sorted(p.name for p in (fresh_bundles / name).iterdir()) == sorted([*BUNDLE_FILES, DP_GRAPH_FILE])
    assert fresh.manifest == committed.manifest
    np.testing.assert_array_max_ulp(fresh.init_params, committed.init_params, maxulp=4)
    x, y = _batch(committed, 7, seed=3)
    for a, b in zip(_train_outputs(fresh, x, y), _train_outputs(committed, x, y), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert _max_error(fresh, x, y) <= TOLERANCE
    m, clip = committed.manifest, {committed.manifest.clip_name: np.array(0.1, np.float32)}
    feed = {**m.split(committed.init_params), m.x_name: x, m.y_name: y, **clip}
    for a, b in zip(
        _session(fresh.dp_onnx).run(None, feed), _session(committed.dp_onnx).run(None, feed), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_running_builtin_bundle_does_not_import_torch() -> None:
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        import onnxruntime as ort
        from models.manifest import builtin

        for name in ("mnist_cnn", "mlp"):
            b = builtin(name)
            m = b.manifest
            feed = {**m.split(b.init_params), m.x_name: np.zeros((5, *m.input_shape), np.float32),
                    m.y_name: np.zeros(5, np.int64)}
            out = ort.InferenceSession(b.train_onnx, providers=["CPUExecutionProvider"]).run(None, feed)
            assert len(out) == 1 + len(m.params)
        print(sorted(k for k in sys.modules if k == "torch" or k.startswith("torch.")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout
