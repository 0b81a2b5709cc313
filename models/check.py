"""Validate a model bundle before anyone trains it: the one check the server and ``fleet model check`` run.

A bundle that loads but cannot train (a graph onnxruntime refuses, gradient names the graph lacks, shapes
that disagree with the manifest, NaN parameters) would stop training for every device, so it is refused
up front. Needs numpy and onnxruntime only (imported when a check runs): no torch, no server code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fleet_protocol.manifest import BUNDLE_FILES, DP_GRAPH_FILE, Bundle, Manifest, read_zip

if TYPE_CHECKING:
    import onnxruntime as ort

CHECK_BATCH = 3  # > 1, so a graph whose batch dimension was specialised to 1 is caught
DP_CHECK_BATCHES = (1, CHECK_BATCH, 8)  # the DP graph's batch sizes; batch 1 is the common DP-SGD case
DP_CHECK_CLIP = 1e-3  # small enough to clip every example: the summed gradient's norm is then <= batch * C
MAX_EXAMPLE_VALUES = 1 << 24  # the synthetic batch stays under ~200 MB whatever the manifest claims
MAX_CLASSES = 1_000_000  # labels are int64 class indices; the check draws random ones below this
MAX_NAME_LENGTH = 120  # the models table stores names in a 120-character column (longer: a 500 on PostgreSQL)
FLOAT = "tensor(float)"
INT64 = "tensor(int64)"


class BundleError(ValueError):
    """A bundle that must not be stored; the message says why, for the admin who uploaded it."""


def bundle_from_files(files: dict[str, bytes]) -> Bundle:
    """Parse the four files into a Bundle, turning every parsing failure into a ``BundleError``."""
    try:
        bundle = Bundle.from_files(files)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise BundleError(f"manifest.json or init.bin: {detail}") from exc
    _check_manifest_types(bundle.manifest)
    return bundle


def _check_manifest_types(manifest: Manifest) -> None:
    """JSON lets ``"shape": [2.0]`` or ``"name": 7`` through the parser; the graphs need ints and names."""

    def is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not isinstance(manifest.name, str) or not manifest.name:
        raise BundleError("manifest.json: name must be a non-empty string")
    if len(manifest.name) > MAX_NAME_LENGTH or not manifest.name.isprintable():
        raise BundleError(f"manifest.json: name must be at most {MAX_NAME_LENGTH} printable characters")
    names = [p.name for p in manifest.params]
    if not names:
        raise BundleError("manifest.json: no parameters")
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise BundleError("manifest.json: parameter names must be distinct non-empty strings")
    shapes = [d for p in manifest.params for d in p.shape]
    if not all(is_int(d) for d in [*shapes, *manifest.input_shape, manifest.num_classes]):
        raise BundleError("manifest.json: shapes, input_shape and num_classes must be integers")
    if not 2 <= manifest.num_classes <= MAX_CLASSES or any(
        d >= 2**31 for d in [*shapes, *manifest.input_shape]
    ):
        raise BundleError(f"manifest.json: num_classes must be in [2, {MAX_CLASSES}], dimensions below 2^31")
    if any(d <= 0 for d in manifest.input_shape):
        raise BundleError("manifest.json: input_shape dimensions must be positive")
    if np.prod(manifest.input_shape, dtype=np.float64) > MAX_EXAMPLE_VALUES:
        raise BundleError(f"manifest.json: one example holds more than {MAX_EXAMPLE_VALUES} values")
    labels = [
        manifest.x_name,
        manifest.y_name,
        manifest.loss_name,
        manifest.logits_name,
        *manifest.grad_names,
        *manifest.dp_grad_names,
        manifest.clip_name,
    ]
    if not all(isinstance(n, str) and n for n in labels):
        raise BundleError("manifest.json: input, output and gradient names must be non-empty strings")


def load_checked(path: str | Path) -> Bundle:
    """The bundle in a directory or a zip file (what ``fleet model check`` reads), parsed and checked."""
    path = Path(path)
    if not path.is_dir():
        return load_checked_zip(path.read_bytes())
    missing = [name for name in BUNDLE_FILES if not (path / name).is_file()]
    if missing:
        raise BundleError(f"bundle is missing {', '.join(missing)}")
    names = [*BUNDLE_FILES, *([DP_GRAPH_FILE] if (path / DP_GRAPH_FILE).is_file() else [])]
    bundle = bundle_from_files({name: (path / name).read_bytes() for name in names})
    check_bundle(bundle)
    return bundle


def load_checked_zip(data: bytes) -> Bundle:
    """The bundle held in a zip archive (as uploaded to the server), parsed and fully checked."""
    try:
        files = read_zip(data)
    except ValueError as exc:
        raise BundleError(str(exc)) from exc
    bundle = bundle_from_files(files)
    check_bundle(bundle)
    return bundle


def check_bundle(bundle: Bundle, *, batch: int = CHECK_BATCH, seed: int = 0) -> None:
    """Raise ``BundleError`` unless both graphs match the manifest and compute finite values.

    Checked: init.bin is finite; both graphs load in onnxruntime; their inputs are the manifest's
    parameters (float32, the manifest's shapes), ``x`` (float32, dynamic batch, ``input_shape``) and, for
    training, ``y`` (int64, batch); the train graph outputs the loss and one gradient per parameter; one
    pass on a synthetic batch gives a finite scalar loss, finite gradients shaped like their parameters
    and finite logits of shape (batch, num_classes). A DP graph, if present, must pass ``check_dp_graph``."""
    manifest = bundle.manifest
    if not np.isfinite(bundle.init_params).all():
        bad = int(np.count_nonzero(~np.isfinite(bundle.init_params)))
        raise BundleError(f"init.bin holds {bad} non-finite values")
    train = _session(bundle.train_onnx, "train.onnx")
    infer = _session(bundle.infer_onnx, "infer.onnx")
    _check_inputs(train, manifest, "train.onnx", with_labels=True)
    _check_inputs(infer, manifest, "infer.onnx", with_labels=False)
    grad_names = _check_train_outputs(train, manifest)
    outputs = {o.name for o in infer.get_outputs()}
    if manifest.logits_name not in outputs:
        raise BundleError(f"infer.onnx has no output {manifest.logits_name!r} (outputs: {sorted(outputs)})")

    rng = np.random.default_rng(seed)
    x = rng.random((batch, *manifest.input_shape), dtype=np.float32)
    y = rng.integers(0, manifest.num_classes, size=batch, dtype=np.int64)
    params = manifest.split(np.ascontiguousarray(bundle.init_params, dtype=np.float32))
    feeds = _feeds(train, params, {manifest.x_name: x, manifest.y_name: y})
    loss, *grads = _run(train, [manifest.loss_name, *grad_names], feeds, "train.onnx")
    if np.asarray(loss).size != 1 or not np.isfinite(loss).all():
        raise BundleError(f"train.onnx: loss {manifest.loss_name!r} is not one finite value: {loss!r}")
    for spec, name, grad in zip(manifest.params, grad_names, grads, strict=True):
        if tuple(grad.shape) != spec.shape:
            raise BundleError(f"train.onnx: gradient {name!r} has shape {grad.shape}, parameter {spec.shape}")
        if not np.isfinite(grad).all():
            raise BundleError(f"train.onnx: gradient {name!r} is not finite")
    (logits,) = _run(infer, [manifest.logits_name], _feeds(infer, params, {manifest.x_name: x}), "infer.onnx")
    if logits.shape != (batch, manifest.num_classes):
        raise BundleError(
            f"infer.onnx: logits have shape {logits.shape}, expected {(batch, manifest.num_classes)}"
        )
    if not np.isfinite(logits).all():
        raise BundleError("infer.onnx: logits are not finite")
    if bundle.dp_onnx is not None:
        check_dp_graph(bundle, params, seed=seed)


def check_dp_graph(bundle: Bundle, params: dict[str, np.ndarray], *, seed: int = 0) -> None:
    """Raise ``BundleError`` unless ``dp_train.onnx`` takes the train inputs plus a scalar float32 clip,
    outputs the loss and one clipped sum per parameter, and, at several batch sizes, gives finite values
    whose global norm is at most batch x clip (what clipping every example guarantees; no torch here, so
    per-example exactness is checked at export, not on upload)."""
    manifest, label = bundle.manifest, DP_GRAPH_FILE
    assert bundle.dp_onnx is not None
    session = _session(bundle.dp_onnx, label)
    inputs = {i.name: i for i in session.get_inputs()}
    clip = inputs.pop(manifest.clip_name, None)
    if clip is None or clip.type != FLOAT or list(clip.shape) != []:
        found = "none" if clip is None else f"{clip.type}{list(clip.shape)}"
        raise BundleError(f"{label}: needs a scalar float32 input {manifest.clip_name!r} (found {found})")
    _check_named_inputs(inputs, manifest, label, with_labels=True)
    outputs = [o.name for o in session.get_outputs()]
    missing = [n for n in [manifest.loss_name, *manifest.dp_grad_names] if n not in outputs]
    if missing:
        raise BundleError(f"{label} lacks the outputs {missing[:10]} (outputs: {outputs[:20]})")
    rng = np.random.default_rng(seed)
    for batch in DP_CHECK_BATCHES:
        x = rng.random((batch, *manifest.input_shape), dtype=np.float32)
        y = rng.integers(0, manifest.num_classes, size=batch, dtype=np.int64)
        clip = np.array(DP_CHECK_CLIP, np.float32)
        data = {manifest.x_name: x, manifest.y_name: y, manifest.clip_name: clip}
        outputs = [manifest.loss_name, *manifest.dp_grad_names]
        loss, *sums = _run(session, outputs, _feeds(session, params, data), label, batch)
        if np.asarray(loss).size != 1 or not np.isfinite(loss).all():
            raise BundleError(f"{label}: loss is not one finite value at batch {batch}: {loss!r}")
        for spec, name, total in zip(manifest.params, manifest.dp_grad_names, sums, strict=True):
            if tuple(total.shape) != spec.shape or not np.isfinite(total).all():
                raise BundleError(f"{label}: {name!r} is not a finite array of shape {spec.shape}")
        norm = float(np.sqrt(sum(np.square(t, dtype=np.float64).sum() for t in sums)))
        if norm > batch * DP_CHECK_CLIP * (1 + 1e-3):
            raise BundleError(
                f"{label} does not clip: at batch {batch} and clip {DP_CHECK_CLIP} the summed gradient's"
                f" norm is {norm:.3g} > {batch * DP_CHECK_CLIP:.3g}"
            )


def _session(model: bytes, label: str) -> ort.InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for every malformed model
        raise BundleError(f"{label} does not load in onnxruntime: {_short(exc)}") from exc


def _check_inputs(
    session: ort.InferenceSession, manifest: Manifest, label: str, *, with_labels: bool
) -> None:
    _check_named_inputs({i.name: i for i in session.get_inputs()}, manifest, label, with_labels=with_labels)


def _check_named_inputs(inputs: dict[str, Any], manifest: Manifest, label: str, *, with_labels: bool) -> None:
    expected = {p.name: (FLOAT, p.shape) for p in manifest.params}
    data_inputs = [manifest.x_name, manifest.y_name] if with_labels else [manifest.x_name]
    for name in data_inputs:
        if name not in inputs:
            raise BundleError(f"{label} has no input {name!r} (inputs: {sorted(inputs)[:20]})")
    for name, arg in inputs.items():
        if name == manifest.x_name:
            _check_batched(arg, FLOAT, manifest.input_shape, label)
        elif with_labels and name == manifest.y_name:
            _check_batched(arg, INT64, (), label)
        elif name not in expected:
            raise BundleError(f"{label}: input {name!r} is neither a manifest parameter nor x/y")
        else:
            dtype, shape = expected[name]
            if arg.type != dtype or tuple(arg.shape) != shape:
                raise BundleError(
                    f"{label}: input {name!r} is {arg.type}{list(arg.shape)},"
                    f" manifest says {dtype}{list(shape)}"
                )


def _check_batched(arg: Any, dtype: str, item_shape: tuple[int, ...], label: str) -> None:
    """A data input: the right dtype, a dynamic first (batch) dimension, then ``item_shape``."""
    shape = list(arg.shape)
    ok = (
        arg.type == dtype
        and len(shape) == len(item_shape) + 1
        and not isinstance(shape[0], int)
        and all(not isinstance(d, int) or d == e for d, e in zip(shape[1:], item_shape, strict=True))
    )
    if not ok:
        raise BundleError(
            f"{label}: input {arg.name!r} is {arg.type}{shape}, expected {dtype}[batch, *{list(item_shape)}]"
            " with a dynamic batch dimension"
        )


def _check_train_outputs(session: ort.InferenceSession, manifest: Manifest) -> list[str]:
    """The gradient output names in manifest order (``grad_names``, else every output after the loss)."""
    outputs = [o.name for o in session.get_outputs()]
    if manifest.loss_name not in outputs:
        raise BundleError(f"train.onnx has no output {manifest.loss_name!r} (outputs: {outputs[:20]})")
    grads = list(manifest.grad_names) or [o for o in outputs if o != manifest.loss_name]
    missing = [g for g in grads if g not in outputs]
    if missing:
        raise BundleError(f"train.onnx lacks the gradient outputs {missing[:10]} named in grad_names")
    if len(grads) != len(manifest.params):
        count = len(manifest.params)
        raise BundleError(f"train.onnx has {len(grads)} gradient outputs for {count} parameters")
    return grads


def _feeds(
    session: ort.InferenceSession, params: dict[str, np.ndarray], data: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The parameters the graph takes (a device feeds only those too) and the data inputs."""
    names = {i.name for i in session.get_inputs()}
    return {**{k: v for k, v in params.items() if k in names}, **data}


def _run(
    session: ort.InferenceSession,
    outputs: list[str],
    feeds: dict[str, np.ndarray],
    label: str,
    batch: int = CHECK_BATCH,
) -> list:
    try:
        return session.run(outputs, feeds)
    except Exception as exc:  # a graph that loads may still fail on real shapes
        raise BundleError(f"{label} fails on a batch of {batch}: {_short(exc)}") from exc


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc).strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"
