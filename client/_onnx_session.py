"""One training step's loss and gradient from a model's ONNX training graph.

Behind the ``GradientComputer`` protocol so the Android onnxruntime (through pyjnius) can stand in
for the onnxruntime Python package.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from fleet_protocol import Manifest

__all__ = ["GradientComputer", "GradientSession", "InferenceSession", "LogitsComputer"]


@runtime_checkable
class GradientComputer(Protocol):
    """Computes the mean loss and its gradient (flat, manifest order) on one mini-batch."""

    def loss_and_gradient(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, np.ndarray]: ...


class GradientSession:
    """An onnxruntime session over ``train.onnx``: parameters by name, ``x``, ``y`` in; loss, grads out."""

    def __init__(self, manifest: Manifest, train_onnx: bytes, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.manifest = manifest
        self.threads = threads
        self._session = ort.InferenceSession(train_onnx, options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        outputs = [o.name for o in self._session.get_outputs()]
        grads = list(manifest.grad_names) or outputs[1:]
        if len(grads) != len(manifest.params):
            raise ValueError(
                f"train graph has {len(grads)} gradient outputs for {len(manifest.params)} params"
            )
        missing = {manifest.x_name, manifest.y_name} - self._inputs
        if missing:
            raise ValueError(f"train graph lacks inputs {sorted(missing)}")
        self._outputs = [manifest.loss_name, *grads]

    def __repr__(self) -> str:
        return f"GradientSession(model={self.manifest.name!r}, threads={self.threads})"

    def loss_and_gradient(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """Mean loss over the batch and the flat float32 gradient (``num_params`` values)."""
        feeds = training_feeds(self.manifest, self._inputs, flat_params, x, y)
        loss, *grads = self._session.run(self._outputs, feeds)
        return float(np.asarray(loss).reshape(())), flat_gradient(self.manifest, grads, "gradient")


def training_feeds(
    manifest: Manifest, inputs: set[str], flat_params: np.ndarray, x: np.ndarray, y: np.ndarray
) -> dict[str, np.ndarray]:
    """A training graph's feeds: the parameters it declares (views of the flat buffer), ``x`` and ``y``."""
    flat = np.ascontiguousarray(flat_params, dtype=np.float32)
    feeds: dict[str, np.ndarray] = {
        name: view for name, view in manifest.split(flat).items() if name in inputs
    }
    feeds[manifest.x_name] = np.ascontiguousarray(x, dtype=np.float32)
    feeds[manifest.y_name] = np.ascontiguousarray(y, dtype=np.int64)
    return feeds


def flat_gradient(manifest: Manifest, outputs: list[np.ndarray], what: str) -> np.ndarray:
    """One output per parameter, each of its size, concatenated in manifest order as float32."""
    for spec, out in zip(manifest.params, outputs, strict=True):
        if out.size != spec.size:
            raise ValueError(f"{what} of {spec.name!r} has {out.size} values, expected {spec.size}")
    return np.concatenate([np.ravel(o) for o in outputs]).astype(np.float32, copy=False)


@runtime_checkable
class LogitsComputer(Protocol):
    """Runs a served ``inference.onnx`` (weights inside, one input): a batch of examples in, logits out."""

    def logits(self, x: np.ndarray) -> np.ndarray: ...


class InferenceSession:
    """An onnxruntime session over a self-contained inference graph (the app's *Try the model*)."""

    def __init__(self, onnx_bytes: bytes, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
        inputs = self._session.get_inputs()
        if len(inputs) != 1:
            raise ValueError(f"inference graph has {len(inputs)} inputs, expected one (x)")
        self._input = inputs[0].name
        self._output = self._session.get_outputs()[0].name

    def __repr__(self) -> str:
        return f"InferenceSession(input={self._input!r}, output={self._output!r})"

    def logits(self, x: np.ndarray) -> np.ndarray:
        feeds = {self._input: np.ascontiguousarray(x, dtype=np.float32)}
        return np.asarray(self._session.run([self._output], feeds)[0], dtype=np.float32)
