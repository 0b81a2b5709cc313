"""The device worker (client/) against a tiny ONNX training graph and an in-process mock server."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from client import (
    DeviceData,
    GradientSession,
    Rejected,
    StaticFeatures,
    TrainingFinished,
    TransportError,
    Worker,
    WorkerConfig,
    WorkerError,
    run_worker,
)
from client._energy import BatteryMeter, EnergyModel, sysfs_battery
from client._features import FEATURE_KEYS, PsutilFeatures
from client._transport import META_HEADER, ApiClient, encode_multipart, encode_push
from models.manifest import BUILTIN_DIR, Manifest, ParamSpec

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


@pytest.fixture(scope="module")
def tiny() -> tuple[Manifest, bytes]:
    return softmax_regression()


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


# --- data, features, energy ----------------------------------------------------------------------


def test_device_data_scales_uint8_and_counts_labels():
    data = DeviceData(np.full((4, 1, 28, 28), 255, np.uint8), np.array([0, 3, 3, 9]))
    assert data.x.dtype == np.float32 and data.x.max() == 1.0 and data.y.dtype == np.int64
    assert data.label_counts(10) == [1, 0, 0, 2, 0, 0, 0, 0, 0, 1]
    with pytest.raises(ValueError):
        data.label_counts(5)


def test_device_data_samples_with_replacement_beyond_its_size():
    data = DeviceData(np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32), np.array([1, 2, 2]))
    x, y = data.sample(50, np.random.default_rng(0))
    assert x.shape == (50, 1, 28, 28) and y.shape == (50,) and set(y) <= {1, 2}
    again = data.sample(50, np.random.default_rng(0))
    assert np.array_equal(again[1], y)  # the generator, not global state, decides


def test_device_data_batches_without_replacement_and_never_beyond_its_size():
    data = DeviceData(np.random.default_rng(0).random((6, 1, 28, 28), dtype=np.float32), np.arange(6))
    x, y = data.batch(1000, np.random.default_rng(0))
    assert x.shape == (6, 1, 28, 28) and y.tolist() == list(range(6))  # all N, each once
    y[0] = 9
    assert data.y[0] == 0  # a copy: an attack flipping the batch's labels leaves the shard alone
    for seed in range(20):
        x, y = data.batch(4, np.random.default_rng(seed))
        assert len(y) == 4 == len(set(y.tolist()))  # no example twice
        np.testing.assert_array_equal(x, data.x[y])
    with pytest.raises(ValueError):
        data.batch(0, np.random.default_rng(0))


def test_device_data_validates_and_loads_npz(tmp_path):
    with pytest.raises(ValueError):
        DeviceData(np.full((2, 1, 28, 28), 3.0, np.float32), np.array([0, 1]))
    with pytest.raises(ValueError):
        DeviceData(np.zeros((2, 1, 28, 28), np.float32), np.array([0]))
    np.savez(tmp_path / "shard.npz", x=np.zeros((5, 1, 28, 28), np.uint8), y=np.arange(5))
    data = DeviceData.from_npz(tmp_path / "shard.npz")
    assert len(data) == 5 and data.label_counts(10)[:6] == [1, 1, 1, 1, 1, 0]


def test_psutil_features_have_the_protocol_keys():
    features = PsutilFeatures(energy_per_cpu_time=EnergyModel().energy_per_cpu_time).read()
    assert set(features) == set(FEATURE_KEYS)
    assert features["total_memory"] > features["available_memory"] > 0
    for key in ("temperature", "cpu_freq_sum"):
        assert features[key] is None or (isinstance(features[key], float) and features[key] > 0)
    assert features["energy_per_cpu_time"] == pytest.approx(2.5 / (11.55 * 3600) * 100)
    assert PsutilFeatures().read()["energy_per_cpu_time"] is None
    json.dumps(features)  # plain numbers and None only


def test_energy_model_numbers():
    model = EnergyModel()
    assert (model.active_power_w, model.battery_wh) == (2.5, pytest.approx(11.55))
    assert model.energy(1.0) == pytest.approx(0.0060125, rel=1e-4)
    assert model.energy(60.0) == pytest.approx(0.36075, rel=1e-4)  # a minute of CPU: 0.36 % battery
    assert EnergyModel(active_power_w=1.0, battery_wh=10.0).energy(36.0) == pytest.approx(0.1)
    assert model.end(model.begin(), 2.0).source == "model"


def test_battery_meter_reads_sysfs_drop_and_falls_back(tmp_path):
    battery = tmp_path / "BAT0"
    battery.mkdir()
    (tmp_path / "AC").mkdir()
    (tmp_path / "AC" / "type").write_text("Mains\n")
    for name, value in {"type": "Battery", "status": "Discharging", "energy_full": "40000000"}.items():
        (battery / name).write_text(value + "\n")
    (battery / "energy_now").write_text("20000000\n")
    meter = BatteryMeter(sysfs_battery(tmp_path), name="battery:sysfs")
    assert meter.energy_per_cpu_time() is None
    mark = meter.begin()
    (battery / "energy_now").write_text("19996000\n")
    reading = meter.end(mark, cpu_seconds=2.0)
    assert reading.source == "battery:sysfs" and reading.value == pytest.approx(0.01)
    assert meter.energy_per_cpu_time() == pytest.approx(0.005)
    mark = meter.begin()  # the gauge did not tick: the model answers
    assert meter.end(mark, 2.0) == meter.fallback.end(None, 2.0)
    (battery / "status").write_text("Charging\n")
    assert meter.end(meter.begin(), 1.0).source == "model"
    assert sysfs_battery(tmp_path / "missing")() is None


# --- the ONNX session ---------------------------------------------------------------------------


def test_gradient_session_matches_numpy(tiny):
    manifest, graph = tiny
    session = GradientSession(manifest, graph, threads=1)
    flat = np.random.default_rng(2).normal(0, 0.05, manifest.num_params).astype(np.float32)
    x, y = make_data(32).sample(32, np.random.default_rng(3))
    loss, gradient = session.loss_and_gradient(flat, x, y)
    ref_loss, ref_gradient = numpy_reference(flat, x, y, manifest.num_classes)
    assert gradient.dtype == np.float32 and gradient.shape == (manifest.num_params,)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    np.testing.assert_allclose(gradient, ref_gradient, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["mnist_cnn", "mlp"])
def test_gradient_session_on_builtin_bundles(name):
    if not (BUILTIN_DIR / name / "manifest.json").exists():
        pytest.skip(f"built-in bundle {name} not exported yet")
    from models.manifest import builtin

    bundle = builtin(name)
    session = GradientSession(bundle.manifest, bundle.train_onnx)
    x, y = make_data(8, bundle.manifest.num_classes).sample(8, np.random.default_rng(0))
    x = x.reshape((8, *bundle.manifest.input_shape))
    loss, gradient = session.loss_and_gradient(bundle.init_params, x, y)
    assert math.isfinite(loss) and gradient.shape == (bundle.manifest.num_params,)
    assert np.isfinite(gradient).all()


# --- transport -------------------------------------------------------------------------------------


def api_for(server: FakeServer, token: str | None = TOKEN) -> ApiClient:
    return ApiClient("http://fleet.test", transport=httpx.MockTransport(server), token=token)


def test_enrollment_sets_the_bearer_token(tiny):
    server = FakeServer(*tiny)
    api = api_for(server, token=None)
    enrollment = api.enroll(KEY, "Galaxy S7")
    assert (enrollment.device_id, api.token) == ("dev-1", TOKEN)
    assert api.active_model()["model_id"] == "m1"
    with pytest.raises(WorkerError, match="bad enrollment key") as info:
        api.enroll("wrong", "Galaxy S7")
    assert info.value.status_code == 401 and not isinstance(info.value, Rejected)


def test_grant_is_parsed(tiny):
    api = api_for(FakeServer(*tiny))
    grant = api.request_task(device_model="S7", features=FEATURES.read(), label_counts=[1] * 10)
    assert (grant.task_id, grant.model_id, grant.version, grant.batch_size) == ("t1", "m1", 3, 16)
    assert grant.predicted_time_ms == 120.0 and grant.params_url.endswith("/versions/3/params")


def test_rejections_map_to_the_exception_tree(tiny):
    server = FakeServer(
        *tiny,
        script=[
            rejection("too_similar", 7.5),
            httpx.Response(503, json={"detail": "x", "reason": "paused"}, headers={"Retry-After": "4"}),
            httpx.Response(429, json={"detail": "slow down"}, headers={"Retry-After": "3"}),
            rejection("training_finished", 60.0, status=410),
            httpx.Response(503, text="upstream down"),
            httpx.Response(500, json={"detail": "boom"}),
            httpx.Response(408, json={"detail": "the body took too long"}),  # a slow link: send again
            httpx.Response(422, json={"detail": "label_counts has the wrong length"}),
            httpx.ConnectError("refused"),
        ],
    )
    api = api_for(server)

    def ask():
        return api.request_task(device_model="S7", features=FEATURES.read(), label_counts=[0] * 10)

    with pytest.raises(Rejected) as info:
        ask()
    assert (info.value.reason, info.value.retry_after, info.value.status_code) == ("too_similar", 7.5, 503)
    with pytest.raises(Rejected) as info:
        ask()
    assert (info.value.reason, info.value.retry_after) == ("paused", 4.0)
    with pytest.raises(Rejected) as info:
        ask()
    assert (info.value.reason, info.value.retry_after) == ("rate_limited", 3.0)
    with pytest.raises(TrainingFinished) as info:
        ask()
    assert isinstance(info.value, Rejected) and info.value.retry_after == 60.0
    for _ in range(3):
        with pytest.raises(TransportError):
            ask()
    with pytest.raises(WorkerError, match="wrong length") as info:
        ask()
    assert info.value.status_code == 422 and not isinstance(info.value, TransportError | Rejected)
    with pytest.raises(TransportError):
        ask()


def test_params_are_cached_per_version_with_etag(tiny):
    server = FakeServer(*tiny)
    server.params[4] = server.params[3] + 1
    api = ApiClient(
        "http://fleet.test", transport=httpx.MockTransport(server), token=TOKEN, params_cache_size=1
    )
    first = api.params("m1", 3, num_params=tiny[0].num_params)
    assert first.dtype == np.float32 and np.array_equal(first, server.params[3]) and not first.flags.writeable
    calls = len(server.calls)
    assert api.params("m1", 3) is first and len(server.calls) == calls  # no request at all
    assert api.params("m1", 3, revalidate=True) is first  # If-None-Match -> 304 keeps the copy
    assert server.calls[-1] == ("GET", "/v1/models/m1/versions/3/params")
    api.params("m1", 4)  # evicts version 3 (cache of one)
    api.params("m1", 3)
    assert server.calls.count(("GET", "/v1/models/m1/versions/3/params")) == 3
    with pytest.raises(WorkerError, match="manifest says"):
        api_for(server).params("m1", 4, num_params=5)


def test_manifest_and_graph_are_cached_per_model(tiny):
    server = FakeServer(*tiny)
    api = api_for(server)
    manifest, graph = api.model("m1")
    assert manifest == tiny[0] and graph == tiny[1]
    api.model("m1")
    assert server.calls.count(("GET", "/v1/models/m1/manifest")) == 1


def test_multipart_body_has_exactly_the_two_parts():
    gradient = np.array([1.5, -2.0, np.float32(1e-30), 0.0], np.float32)
    meta = {"label_counts": [1, 3], "loss": 0.5, "compute_time_ms": 12.0, "energy": None, "batch_size": 4}
    content_type, body = encode_multipart(meta, gradient)
    parts = parse_multipart(content_type, body)
    assert list(parts) == ["meta", "gradient"]
    assert parts["meta"][0]["Content-Type"] == "application/json" and json.loads(parts["meta"][1]) == meta
    assert parts["gradient"][0]["Content-Type"] == "application/octet-stream"
    assert np.array_equal(np.frombuffer(parts["gradient"][1], "<f4"), gradient)
    with pytest.raises(ValueError):
        encode_multipart({**meta, "loss": float("nan")}, gradient)


def test_raw_push_carries_the_gradient_bytes_and_the_meta_header():
    gradient = np.array([1.5, -2.0, np.float32(1e-30), 0.0], np.float32)
    meta = {"label_counts": [1, 3], "loss": 0.5, "compute_time_ms": 12.0, "energy": None, "batch_size": 4}
    headers, body = encode_push(meta, gradient)
    assert headers["Content-Type"] == "application/octet-stream"
    assert json.loads(headers[META_HEADER]) == meta and headers[META_HEADER].isascii()
    assert np.array_equal(np.frombuffer(body, "<f4"), gradient)
    headers, body = encode_push(meta, gradient, "float16")
    assert json.loads(headers[META_HEADER])["encoding"] == "float16" and len(body) == 2 * gradient.size
    with pytest.raises(ValueError):
        encode_push({**meta, "loss": float("nan")}, gradient)


def test_multipart_body_parses_with_starlette():
    """The server's parser (Starlette/python-multipart) sees meta as a field and gradient as a file."""
    pytest.importorskip("starlette")
    pytest.importorskip("python_multipart")
    import asyncio

    from starlette.requests import Request

    gradient = np.linspace(-1, 1, 1000, dtype=np.float32)
    content_type, body = encode_multipart({"loss": 1.0}, gradient)

    async def form() -> tuple[str, bytes]:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(b"content-type", content_type.encode())]
        request = Request({"type": "http", "method": "POST", "headers": headers}, receive)
        async with request.form() as parsed:
            return parsed["meta"], await parsed["gradient"].read()

    meta, raw = asyncio.run(form())
    assert json.loads(meta) == {"loss": 1.0} and np.array_equal(np.frombuffer(raw, "<f4"), gradient)


# --- the worker ---------------------------------------------------------------------------------------


def test_run_one_end_to_end(tiny):
    server = FakeServer(*tiny)
    with make_worker(server) as worker:
        report = worker.run_one()
        assert server.calls[:2] == [("POST", "/v1/devices"), ("GET", "/v1/models/active")]
        assert len(server.pushes) == 1 and server.pushes[0]["gradient"].shape == (tiny[0].num_params,)
        assert (report.task_id, report.version, report.current_version, report.batch_size) == ("t1", 3, 4, 16)
        assert report.staleness == 0 and report.weight == 1.0 and report.predicted_time_ms == 120.0
        assert report.loss == pytest.approx(server.pushes[0]["meta"]["loss"])
        assert report.energy_source == "model" and report.energy == pytest.approx(
            server.pushes[0]["meta"]["energy"]
        )
        assert report.compute_time_ms == server.pushes[0]["meta"]["compute_time_ms"] > 0
        worker.run_one()  # second task: params, manifest and graph come from the caches
    assert server.calls.count(("GET", "/v1/models/m1/versions/3/params")) == 1
    assert server.calls.count(("GET", "/v1/models/m1/graphs/train.onnx")) == 1
    assert server.calls.count(("POST", "/v1/devices")) == 1


def test_gradient_pushed_is_the_gradient_of_the_sampled_batch(tiny):
    server = FakeServer(*tiny, batch_size=8)
    data = make_data(20)
    make_worker(server, data=data, seed=11).run_one()
    x, y = data.batch(8, np.random.default_rng(np.random.SeedSequence(11).spawn(2)[0]))
    _, ref = numpy_reference(server.params[3], x, y, 10)
    np.testing.assert_allclose(server.pushes[0]["gradient"], ref, rtol=1e-4, atol=1e-6)


def test_a_task_computes_at_most_the_examples_held_and_says_so(tiny):
    server = FakeServer(*tiny, batch_size=1000)  # the operator's phone: 2 drawings, a grant of 1,000
    data = make_data(2)
    report = make_worker(server, data=data).run_one()
    meta = server.pushes[0]["meta"]
    assert report.batch_size == meta["batch_size"] == sum(meta["label_counts"]) == 2
    _, ref = numpy_reference(server.params[3], data.x, data.y, 10)  # each example once: the exact mean
    np.testing.assert_allclose(server.pushes[0]["gradient"], ref, rtol=1e-4, atol=1e-6)


def test_min_ms_per_sample_stretches_compute_time(tiny):
    server = FakeServer(*tiny, batch_size=10)
    report = make_worker(server, min_ms_per_sample=5.0).run_one()
    assert report.compute_time_ms >= 50.0
    assert report.energy >= EnergyModel().energy(0.05) * 0.99  # the emulated phone was busy meanwhile


@pytest.mark.parametrize("knob", ["min_ms_per_sample", "delay_ms_per_sample"])
def test_the_emulated_phone_stretches_the_examples_really_computed(tiny, knob):
    server = FakeServer(*tiny, batch_size=1000)  # 1,000 granted, 3 held: 3 x 100 ms, not 100 s
    report = make_worker(server, data=make_data(3), **{knob: 100.0}).run_one()
    assert report.batch_size == 3 and 300.0 <= report.compute_time_ms < 5000.0
    assert report.energy >= EnergyModel().energy(0.3) * 0.99  # charged for the 3 examples' stretched time


def test_push_is_retried_with_the_same_body(tiny):
    server = FakeServer(*tiny)
    server.push_failures = 1
    report = make_worker(server).run_one()
    assert report.task_id == "t1" and len(server.pushes) == 1
    assert server.calls.count(("POST", "/v1/tasks/t1/result")) == 2


def test_run_loops_with_backoff_until_training_finishes(tiny):
    server = FakeServer(
        *tiny,
        script=[
            rejection("paused", 2.0),
            httpx.Response(500, json={"detail": "db"}),
            rejection("small_batch", 1e6),
        ],
    )
    grants = 2
    slept: list[float] = []
    reports = []
    worker = make_worker(server, max_retry_after=30.0, backoff_initial=1.0, backoff_max=8.0)
    worker.sleep = slept.append
    worker.on_report = reports.append

    original = server.task

    def task(body):
        nonlocal grants
        if not server.script and grants == 0:
            return rejection("training_finished", 0.0, status=410)
        if not server.script:
            grants -= 1
        return original(body)

    server.task = task
    summary = worker.run()
    assert summary.finished and summary.stop_reason == "training_finished"
    assert summary.tasks == 2 and len(reports) == 2 and summary.errors == 1
    assert summary.rejections == {"paused": 1, "small_batch": 1}
    assert slept[0] == 2.0 and 0.5 <= slept[1] <= 1.0 and slept[2] == 30.0  # retry_after capped


def test_run_stops_on_max_tasks_and_stop_event(tiny):
    server = FakeServer(*tiny)
    summary = make_worker(server, max_tasks=3).run()
    assert summary.tasks == 3 and summary.stop_reason == "max_tasks" and not summary.finished
    stop = threading.Event()
    worker = make_worker(FakeServer(*tiny))
    worker.on_report = lambda report: stop.set()
    assert worker.run(stop).tasks == 1
    server = FakeServer(*tiny, script=[rejection("paused", 100.0)])
    waits: list[float] = []

    class InstantEvent(threading.Event):
        """Records each wait and returns at once: the check is on what was asked, not on the clock."""

        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return super().wait(0)

    summary = make_worker(server, max_seconds=0.2).run(InstantEvent())
    assert summary.stop_reason == "max_seconds" and summary.elapsed_s >= 0.2
    assert waits and max(waits) <= 0.2  # the server's 100 s retry_after is capped by max_seconds


def test_run_reenrolls_on_401_and_gives_up_on_repeated_errors(tiny):
    server = FakeServer(*tiny)
    worker = make_worker(server, max_tasks=1)
    worker.run_one()
    server.tokens, server.issue = {"new-token"}, "new-token"  # the server forgot the device
    assert worker.run().tasks == 1 and worker.api.token == "new-token"
    assert server.calls.count(("POST", "/v1/devices")) == 2
    bad = make_worker(FakeServer(*tiny), max_consecutive_errors=3)
    bad.config = WorkerConfig(**{**bad.config.__dict__, "enrollment_key": "wrong"})
    with pytest.raises(WorkerError, match="bad enrollment key"):
        bad.run()


def test_run_worker_is_what_the_cli_calls(tiny, tmp_path):
    np.savez(tmp_path / "shard.npz", x=np.zeros((20, 1, 28, 28), np.uint8), y=np.arange(20) % 10)
    server = FakeServer(*tiny)
    seen = []
    config = WorkerConfig(
        base_url="http://fleet.test", enrollment_key=KEY, data=tmp_path / "shard.npz", max_tasks=2
    )
    summary = run_worker(config, on_report=seen.append, transport=httpx.MockTransport(server))
    assert summary.tasks == 2 and [r.task_id for r in seen] == ["t1", "t2"]


def test_a_full_task_never_imports_torch_sklearn_or_fastapi(tiny, tmp_path):
    manifest, graph = tiny
    (tmp_path / "manifest.json").write_text(manifest.to_json())
    (tmp_path / "train.onnx").write_bytes(graph)
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        from pathlib import Path
        import httpx, numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        import client
        from models.manifest import Manifest
        spec = importlib.util.spec_from_file_location("tc", {str(Path(__file__))!r})
        tc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tc)
        folder = Path({str(tmp_path)!r})
        server = tc.FakeServer(Manifest.from_json((folder / "manifest.json").read_text()),
                               (folder / "train.onnx").read_bytes())
        config = client.WorkerConfig(base_url="http://fleet.test", enrollment_key=tc.KEY, data=tc.make_data(),
                                     max_tasks=1)
        with client.Worker(config, transport=httpx.MockTransport(server)) as worker:
            summary = worker.run()
        assert summary.tasks == 1 and len(server.pushes) == 1, summary
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "sklearn", "fastapi", "server",
                                                                        "profiler", "onnx"))
        print("HEAVY", heavy)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
