"""Doubles for the device worker's tests: a tiny ONNX training graph (softmax regression, its loss and
gradient written out by hand) and an in-process mock of the coordinator (docs/protocol.md)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from client import (
    DeviceData,
    StaticFeatures,
    Worker,
    WorkerConfig,
)
from client._energy import EnergyModel
from client._features import FEATURE_KEYS
from client._transport import META_HEADER, ApiClient
from models.manifest import Manifest, ParamSpec

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "device-token"
KEY = "enroll-me"
FEATURES = StaticFeatures({"available_memory": 1e9, "total_memory": 4e9, "cpu_freq_sum": 8000.0})

# --- a tiny training graph: softmax regression, loss and gradient written out by hand ----------


def softmax_regression(
    input_shape: tuple[int, ...] = (1, 28, 28), classes: int = 10
) -> tuple[Manifest, bytes]:
    """Manifest and train.onnx of softmax regression (W: (D, C), b: (C,)), mean cross-entropy."""
    from onnx import TensorProto, helper

    dim = math.prod(input_shape)
    manifest = Manifest(
        name="softmax",
        params=(ParamSpec("W", (dim, classes), 0), ParamSpec("b", (classes,), dim * classes)),
        input_shape=input_shape,
        num_classes=classes,
        grad_names=("grad_W", "grad_b"),
    )
    const = helper.make_tensor
    node = helper.make_node
    nodes = [
        node("Flatten", ["x"], ["X"], axis=1),
        node("MatMul", ["X", "W"], ["XW"]),
        node("Add", ["XW", "b"], ["logits"]),
        node("Softmax", ["logits"], ["p"], axis=1),
        node("LogSoftmax", ["logits"], ["logp"], axis=1),
        node("OneHot", ["y", "depth", "onoff"], ["onehot"], axis=-1),
        node("Shape", ["y"], ["n"]),
        node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        node("Mul", ["onehot", "logp"], ["ll"]),
        node("ReduceSum", ["ll"], ["sum_ll"], keepdims=0),
        node("Neg", ["sum_ll"], ["neg"]),
        node("Div", ["neg", "nf"], ["loss1"]),
        node("Squeeze", ["loss1"], ["loss"]),
        node("Sub", ["p", "onehot"], ["diff"]),
        node("Div", ["diff", "nf"], ["dlogits"]),
        node("Transpose", ["X"], ["Xt"]),
        node("MatMul", ["Xt", "dlogits"], ["grad_W"]),
        node("ReduceSum", ["dlogits", "axis0"], ["grad_b"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "softmax_train",
        inputs=[
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [dim, classes]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [classes]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *input_shape]),
            helper.make_tensor_value_info("y", TensorProto.INT64, ["N"]),
        ],
        outputs=[
            helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("grad_W", TensorProto.FLOAT, [dim, classes]),
            helper.make_tensor_value_info("grad_b", TensorProto.FLOAT, [classes]),
        ],
        initializer=[
            const("depth", TensorProto.INT64, [1], [classes]),
            const("onoff", TensorProto.FLOAT, [2], [0.0, 1.0]),
            const("axis0", TensorProto.INT64, [1], [0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return manifest, model.SerializeToString()


def numpy_reference(flat: np.ndarray, x: np.ndarray, y: np.ndarray, classes: int) -> tuple[float, np.ndarray]:
    """The same loss and gradient in float64 numpy."""
    n = len(y)
    X = x.reshape(n, -1).astype(np.float64)
    W = flat[: X.shape[1] * classes].reshape(X.shape[1], classes).astype(np.float64)
    b = flat[X.shape[1] * classes :].astype(np.float64)
    logits = X @ W + b
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    onehot = np.eye(classes)[y]
    loss = -(onehot * logp).sum() / n
    dlogits = (np.exp(logp) - onehot) / n
    return float(loss), np.concatenate([(X.T @ dlogits).ravel(), dlogits.sum(axis=0)])


def make_data(n: int = 64, classes: int = 10, seed: int = 0) -> DeviceData:
    rng = np.random.default_rng(seed)
    return DeviceData(rng.random((n, 1, 28, 28), dtype=np.float32), rng.integers(0, classes, n))


# --- an in-process mock of the coordinator (docs/protocol.md) ----------------------------------


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[dict[str, str], bytes]]:
    """name -> (headers, content) of a multipart/form-data body, parsed by hand."""
    match = re.search(r"boundary=([^;]+)", content_type)
    assert content_type.startswith("multipart/form-data") and match
    delimiter = b"--" + match.group(1).strip('"').encode()
    chunks = body.split(delimiter)
    assert chunks[0] == b"" and chunks[-1] == b"--\r\n"
    parts = {}
    for chunk in chunks[1:-1]:
        assert chunk.startswith(b"\r\n") and chunk.endswith(b"\r\n")
        head, content = chunk[2:-2].split(b"\r\n\r\n", 1)
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        name = re.search(r'name="([^"]+)"', headers["Content-Disposition"]).group(1)
        assert name not in parts
        parts[name] = (headers, content)
    return parts


class FakeServer:
    """A handler for httpx.MockTransport that speaks the device side of the protocol and checks pushes."""

    def __init__(self, manifest: Manifest, graph: bytes, *, batch_size: int = 16, script: list | None = None):
        self.manifest = manifest
        self.graph = graph
        self.batch_size = batch_size
        self.version = 3
        self.params = {3: np.random.default_rng(1).normal(0, 0.01, manifest.num_params).astype("<f4")}
        self.script = list(script or [])  # answers to POST /v1/tasks, then grants
        self.calls: list[tuple[str, str]] = []
        self.pushes: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.push_failures = 0
        self.tokens = {TOKEN}
        self.issue = TOKEN
        self.next_task = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        self.calls.append((method, path))
        if (method, path) == ("POST", "/v1/devices"):
            body = json.loads(request.content)
            if body["enrollment_key"] != KEY:
                return httpx.Response(401, json={"detail": "bad enrollment key"})
            assert body["device_model"]
            return httpx.Response(201, json={"device_id": "dev-1", "token": self.issue})
        if request.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return httpx.Response(401, json={"detail": "bad token"})
        model = "/v1/models/m1"
        if (method, path) == ("GET", "/v1/models/active"):
            return httpx.Response(200, json={"model_id": "m1", "num_classes": self.manifest.num_classes})
        if (method, path) == ("POST", "/v1/tasks"):
            return self.task(json.loads(request.content))
        if (method, path) == ("GET", f"{model}/manifest"):
            return httpx.Response(200, text=self.manifest.to_json())
        if (method, path) == ("GET", f"{model}/graphs/train.onnx"):
            return httpx.Response(200, content=self.graph)
        if match := re.fullmatch(rf"{model}/versions/(\d+)/params", path):
            version = int(match.group(1))
            etag = f'"m1-{version}"'
            if request.headers.get("If-None-Match") == etag:
                return httpx.Response(304, headers={"ETag": etag})
            return httpx.Response(200, content=self.params[version].tobytes(), headers={"ETag": etag})
        if match := re.fullmatch(r"/v1/tasks/(t\d+)/result", path):
            if self.push_failures:
                self.push_failures -= 1
                return httpx.Response(502, text="bad gateway")
            return self.push(match.group(1), request)
        return httpx.Response(404, json={"detail": f"no route {method} {path}"})

    def task(self, body: dict[str, Any]) -> httpx.Response:
        assert body["device_model"]
        assert set(body["features"]) == set(FEATURE_KEYS)
        assert len(body["label_counts"]) == self.manifest.num_classes
        if self.script:
            answer = self.script.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        self.next_task += 1
        task_id = f"t{self.next_task}"
        return httpx.Response(
            201,
            json={
                "task_id": task_id, "model_id": "m1", "version": self.version, "batch_size": self.batch_size,
                "lease_seconds": 60, "lease_deadline": 4e9, "slo_time_ms": 3000.0,
                "predicted_time_ms": 120.0, "similarity": 0.9, "dp": None,
                "params_url": f"/v1/models/m1/versions/{self.version}/params",
                "manifest_url": "/v1/models/m1/manifest",
                "train_graph_url": "/v1/models/m1/graphs/train.onnx",
            },
        )  # fmt: skip

    def push(self, task_id: str, request: httpx.Request) -> httpx.Response:
        assert request.headers["Content-Type"] == "application/octet-stream"
        meta = json.loads(request.headers[META_HEADER])
        assert set(meta) == {"label_counts", "loss", "compute_time_ms", "energy", "batch_size"}
        assert 1 <= meta["batch_size"] <= self.batch_size and meta["batch_size"] == sum(meta["label_counts"])
        assert len(meta["label_counts"]) == self.manifest.num_classes
        assert meta["compute_time_ms"] > 0 and math.isfinite(meta["loss"])
        assert meta["energy"] is None or meta["energy"] >= 0
        if len(request.content) != 4 * self.manifest.num_params:
            return httpx.Response(422, json={"detail": "wrong gradient length"})
        gradient = np.frombuffer(request.content, dtype="<f4")
        assert np.isfinite(gradient).all()
        self.bodies.append(request.content)
        self.pushes.append({"task_id": task_id, "meta": meta, "gradient": gradient})
        return httpx.Response(
            200,
            json={"task_id": task_id, "staleness": 0, "weight": 1.0, "version": self.version + 1,
                  "applied": True, "duplicate": False},
        )  # fmt: skip


def make_worker(server: FakeServer, data: DeviceData | None = None, **options: Any) -> Worker:
    options.setdefault("seed", 0)
    config = WorkerConfig(
        base_url="http://fleet.test",
        enrollment_key=KEY,
        data=data or make_data(),
        device_model="Pixel 9",
        **options,
    )
    return Worker(
        config,
        transport=httpx.MockTransport(server),
        features=FEATURES,
        energy=EnergyModel(),
        sleep=lambda s: None,
    )


def rejection(reason: str = "paused", retry_after: float = 2.0, status: int = 503) -> httpx.Response:
    body = {"detail": reason, "reason": reason, "retry_after": retry_after}
    return httpx.Response(status, json=body, headers={"Retry-After": str(int(retry_after))})


def api_for(server: FakeServer, token: str | None = TOKEN) -> ApiClient:
    return ApiClient("http://fleet.test", transport=httpx.MockTransport(server), token=token)
