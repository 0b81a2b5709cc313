"""The onnxruntime Android library (``ai.onnxruntime`` from the AAR) through pyjnius: gradients and inference.

python-for-android has no onnxruntime recipe, so on a phone the Java API runs the same ONNX graphs the
desktop runs with the onnxruntime Python package. Arrays cross the bridge as bytes in direct
``ByteBuffer``s (native order) and come back as byte copies, never as per-element Java calls.
Importable anywhere; desktop tests drive it with stand-ins for the Java classes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleet_protocol import Manifest

from ._android import JavaBridge, Pyjnius

__all__ = ["AndroidGradientSession", "AndroidInferenceSession", "OrtJava"]

ORT = "ai.onnxruntime."


class OrtJava:
    """One ``OrtSession`` from model bytes, run with numpy feeds; the shared half of both sessions."""

    def __init__(self, model: bytes, threads: int = 1, *, bridge: JavaBridge | None = None) -> None:
        self.bridge = bridge if bridge is not None else Pyjnius()
        self.env = self.bridge.autoclass(ORT + "OrtEnvironment").getEnvironment()
        options = self.bridge.autoclass(ORT + "OrtSession$SessionOptions")()
        options.setIntraOpNumThreads(max(1, threads))
        self.session = self.env.createSession(bytes(model), options)
        self.inputs = [str(name) for name in self.session.getInputNames().toArray()]
        self.outputs = [str(name) for name in self.session.getOutputNames().toArray()]

    def __repr__(self) -> str:
        return f"OrtJava(inputs={self.inputs!r}, outputs={self.outputs!r})"

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
        """``OrtSession.run(Map<String, OnnxTensor>, Set<String>)``; every tensor is closed after."""
        autoclass = self.bridge.autoclass
        tensors, inputs, requested = [], autoclass("java.util.HashMap")(), autoclass("java.util.HashSet")()
        try:
            for name, array in feeds.items():
                tensor = self._tensor(array)
                tensors.append(tensor)
                inputs.put(name, tensor)
            for name in outputs:
                requested.add(name)
            result = self.session.run(inputs, requested)
            try:
                return [_to_numpy(result.get(name).get()) for name in outputs]
            finally:
                result.close()
        finally:
            for tensor in tensors:
                tensor.close()

    def _tensor(self, array: np.ndarray) -> Any:
        autoclass = self.bridge.autoclass
        order = autoclass("java.nio.ByteOrder").nativeOrder()
        buffer = autoclass("java.nio.ByteBuffer").allocateDirect(max(1, array.nbytes)).order(order)
        buffer.put(array.tobytes())
        buffer.rewind()
        if array.dtype == np.float32:
            typed = buffer.asFloatBuffer()
        elif array.dtype == np.int64:
            typed = buffer.asLongBuffer()
        else:
            raise TypeError(f"no OnnxTensor for dtype {array.dtype}")
        return autoclass(ORT + "OnnxTensor").createTensor(self.env, typed, [int(d) for d in array.shape])


def _to_numpy(value: Any) -> np.ndarray:
    """An ``OnnxTensor`` (float or long) as a numpy array, from ``getByteBuffer()``'s copy."""
    info = value.getInfo()
    shape = tuple(int(d) for d in info.getShape())
    dtype = {"FLOAT": np.float32, "INT64": np.int64}.get(str(info.type.name()), np.float32)
    return np.frombuffer(_java_bytes(value.getByteBuffer()), dtype=dtype).reshape(shape).copy()


def _java_bytes(buffer: Any) -> bytes:
    """The bytes of a Java ``ByteBuffer``; pyjnius hands ``byte[]`` back as bytes-like or a list of ints."""
    if not buffer.hasArray():  # a direct buffer: copy it to the heap first
        heap = buffer.duplicate()
        heap.rewind()
        raw = bytearray()
        while heap.hasRemaining():
            raw.append(heap.get() & 0xFF)
        return bytes(raw)
    data = buffer.array()
    if hasattr(data, "tostring"):
        data = data.tostring()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    return np.asarray(data, dtype=np.int8).tobytes()  # signed Java bytes


class AndroidGradientSession:
    """``GradientComputer`` over ``train.onnx`` on the Android library (feeds as in ``GradientSession``)."""

    def __init__(
        self, manifest: Manifest, train_onnx: bytes, threads: int = 1, *, bridge: JavaBridge | None = None
    ) -> None:
        self.manifest = manifest
        self.ort = OrtJava(train_onnx, threads, bridge=bridge)
        grads = list(manifest.grad_names) or self.ort.outputs[1:]
        if len(grads) != len(manifest.params):
            raise ValueError(
                f"train graph has {len(grads)} gradient outputs for {len(manifest.params)} params"
            )
        missing = {manifest.x_name, manifest.y_name} - set(self.ort.inputs)
        if missing:
            raise ValueError(f"train graph lacks inputs {sorted(missing)}")
        self._outputs = [manifest.loss_name, *grads]

    def __repr__(self) -> str:
        return f"AndroidGradientSession(model={self.manifest.name!r})"

    def loss_and_gradient(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, np.ndarray]:
        flat = np.ascontiguousarray(flat_params, dtype=np.float32)
        inputs = set(self.ort.inputs)
        split = self.manifest.split(flat)
        feeds = {name: np.ascontiguousarray(v) for name, v in split.items() if name in inputs}
        feeds[self.manifest.x_name] = np.ascontiguousarray(x, dtype=np.float32)
        feeds[self.manifest.y_name] = np.ascontiguousarray(y, dtype=np.int64)
        loss, *grads = self.ort.run(feeds, self._outputs)
        for spec, grad in zip(self.manifest.params, grads, strict=True):
            if grad.size != spec.size:
                raise ValueError(f"gradient of {spec.name!r} has {grad.size} values, expected {spec.size}")
        gradient = np.concatenate([np.ravel(g) for g in grads]).astype(np.float32, copy=False)
        return float(np.asarray(loss).reshape(())), gradient


class AndroidInferenceSession:
    """``LogitsComputer`` over a served ``inference.onnx`` with the Android library."""

    def __init__(self, onnx_bytes: bytes, threads: int = 1, *, bridge: JavaBridge | None = None) -> None:
        self.ort = OrtJava(onnx_bytes, threads, bridge=bridge)
        if len(self.ort.inputs) != 1:
            raise ValueError(f"inference graph has {len(self.ort.inputs)} inputs, expected one (x)")

    def __repr__(self) -> str:
        return "AndroidInferenceSession()"

    def logits(self, x: np.ndarray) -> np.ndarray:
        feeds = {self.ort.inputs[0]: np.ascontiguousarray(x, dtype=np.float32)}
        return self.ort.run(feeds, self.ort.outputs[:1])[0]
