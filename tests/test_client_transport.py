"""The device worker's transport (client/_transport.py) against an in-process mock server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from client import (
    Rejected,
    TrainingFinished,
    TransportError,
    WorkerError,
)
from client._transport import META_HEADER, ApiClient, encode_multipart, encode_push
from tests.support.client_doubles import FEATURES, KEY, TOKEN, FakeServer, api_for, parse_multipart, rejection

# --- transport -------------------------------------------------------------------------------------


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
