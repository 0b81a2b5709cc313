"""One training step's loss and gradient from a model's ONNX training graph.

Behind the ``GradientComputer`` protocol so the Android onnxruntime (through pyjnius) can stand in
for the onnxruntime Python package.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from fleet_protocol import Manifest

__all__ = ["GradientComputer", "GradientSession"]


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
        flat = np.ascontiguousarray(flat_params, dtype=np.float32)
        feeds: dict[str, np.ndarray] = {
            name: view for name, view in self.manifest.split(flat).items() if name in self._inputs
        }
        feeds[self.manifest.x_name] = np.ascontiguousarray(x, dtype=np.float32)
        feeds[self.manifest.y_name] = np.ascontiguousarray(y, dtype=np.int64)
        loss, *grads = self._session.run(self._outputs, feeds)
        for spec, grad in zip(self.manifest.params, grads, strict=True):
            if grad.size != spec.size:
                raise ValueError(f"gradient of {spec.name!r} has {grad.size} values, expected {spec.size}")
        gradient = np.concatenate([np.ravel(g) for g in grads]).astype(np.float32, copy=False)
        return float(np.asarray(loss).reshape(())), gradient
