"""Nothing data-dependent leaves a DP device un-noised (issue 27, finding 1 and 3): every field of what the
real client Worker sends to an in-process DP coordinator is enumerated, for two neighbouring datasets
(one example replaced by an outlier with another label), and only the noised gradient and the declared
timing side channel may differ. Every field a device may send is classified, so a new one fails here
until someone says what it reveals."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import httpx
import numpy as np
import pytest

from client import DeviceData, Worker, WorkerConfig
from client._energy import EnergyModel
from fleet_protocol import PushMeta, TaskAsk
from fleet_protocol.accounting import bucket_examples
from tests.conftest import ENROLL, FEATURES
from tests.support.inprocess import InProcessServer

# Every field of a task request, and what it says about the device's data under DP.
REQUEST_FIELDS = {
    "features": "the device's state (memory, temperature, CPU, energy per CPU second): not its data",
    "device_model": "the device's model name: not its data",
    "local_examples": "bucket_examples(N) under DP: public under replace-one, the same for neighbours",
    "label_counts": "data-dependent: never sent under DP (left out of the JSON)",
}
# Every field of a push's meta (the gradient is the body: the Gaussian mechanism's noised output).
PUSH_FIELDS = {
    "label_counts": "data-dependent: null under DP",
    "loss": "data-dependent: null under DP",
    "batch_size": "the terms' expected_batch B under DP, never the sampled batch's size",
    "compute_time_ms": "timing side channel (below)",
    "energy": "timing side channel (below)",
    "encoding": "the wire encoding the device was configured with: not its data",
}
# The documented timing side channel (docs/privacy.md): time and energy are scaled to B (measured × B /
# max(|S|, 1)), so the sampled batch's size does not show, but the per-example cost still may. Declared,
# not noised: these two fields may differ between neighbouring datasets; nothing else may.
TIMING_SIDE_CHANNEL = frozenset({"compute_time_ms", "energy"})
N, CLASSES = 200, 10


class FixedFeatures:
    """Device state that does not change between the two runs (it is not data; psutil's would drift)."""

    def read(self) -> dict[str, float | None]:
        return dict(FEATURES)


def neighbours() -> tuple[DeviceData, DeviceData]:
    """D and D': the same N examples but the first, replaced by an outlier with another label."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 0.2, size=(N, 1, 28, 28)).astype(np.float32)
    y = np.arange(N) % CLASSES
    x_out, y_out = x.copy(), y.copy()
    x_out[0], y_out[0] = 1.0, (y[0] + 5) % CLASSES
    return DeviceData(x, y), DeviceData(x_out, y_out)


def what_the_device_sends(http: Any, data: DeviceData, tasks: int) -> dict[str, list[Any]]:
    """The JSON of every task request and every push meta one real Worker sends for ``tasks`` tasks to the
    in-process app ``http`` (a TestClient: the routes, schemas and wire encoding of a real server)."""
    sent: dict[str, list[Any]] = {"requests": [], "pushes": []}

    def capture(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path == "/v1/tasks":
            sent["requests"].append(json.loads(request.content))
        elif request.method == "POST" and request.url.path.endswith("/result"):
            sent["pushes"].append(json.loads(request.headers["fleet-meta"]))

    hooks = http.event_hooks
    http.event_hooks = {**hooks, "request": [*hooks.get("request", []), capture]}
    config = WorkerConfig(base_url=str(http.base_url), enrollment_key=ENROLL, data=data, seed=3)
    try:
        with Worker(config, client=http, features=FixedFeatures(), energy=EnergyModel()) as worker:
            reports = [worker.run_one() for _ in range(tasks)]
    finally:
        http.event_hooks = hooks
    assert all(r.applied for r in reports)
    return sent


@pytest.fixture
def dp_server(tmp_path, database_url):
    # q = B/bucket(N) = 1: every example, the outlier included, is in every task (the worst case for a leak)
    server = InProcessServer(
        tmp_path / "server",
        database_url=database_url,
        initial_model="logreg",
        dp="true",
        dp_noise_multiplier=2.0,
        dp_epsilon_budget=None,
        min_batch=bucket_examples(N),
        max_batch=bucket_examples(N),
    ).start()
    yield server.http
    server.stop()


def differing(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    return {key for key in a.keys() | b.keys() if a.get(key, "absent") != b.get(key, "absent")}


def test_neighbouring_datasets_send_the_same_fields_but_the_gradient_and_the_timing(dp_server):
    d, d_prime = neighbours()
    first = what_the_device_sends(dp_server, d, tasks=2)
    second = what_the_device_sends(dp_server, d_prime, tasks=2)
    assert len(first["requests"]) == len(second["requests"]) == 2
    assert len(first["pushes"]) == len(second["pushes"]) == 2
    leaks = {
        f"request {key}"
        for a, b in zip(first["requests"], second["requests"], strict=True)
        for key in differing(a, b)
    } | {
        f"push {key}"
        for a, b in zip(first["pushes"], second["pushes"], strict=True)
        for key in differing(a, b) - TIMING_SIDE_CHANNEL
    }
    # before issue 27: the request's label_counts told the replaced label, the push's loss the outlier
    assert leaks == set(), (first, second)
    for sent in (first, second):
        assert all(
            "label_counts" not in r and r["local_examples"] == bucket_examples(N) for r in sent["requests"]
        )
        assert all(p["loss"] is None and p["label_counts"] is None for p in sent["pushes"])
        assert all(p["batch_size"] == bucket_examples(N) for p in sent["pushes"])  # B, not |S| = N


def test_every_field_a_device_may_send_is_classified(dp_server, make_api):
    """The wire contract's fields are exactly the classified ones, and what the worker sends, with DP and
    without, uses no other key: a field added later fails here until it is classified above."""
    assert {f.name for f in fields(TaskAsk)} == set(REQUEST_FIELDS)
    assert {f.name for f in fields(PushMeta)} == set(PUSH_FIELDS)
    assert set(PUSH_FIELDS) >= TIMING_SIDE_CHANNEL
    d, _ = neighbours()
    sent = what_the_device_sends(dp_server, d, tasks=1)
    without_dp = what_the_device_sends(
        make_api(initial_model="logreg", min_batch=16, max_batch=16).http, d, 1
    )
    for each in (sent, without_dp):
        assert {key for r in each["requests"] for key in r} <= set(REQUEST_FIELDS)
        assert {key for p in each["pushes"] for key in p} <= set(PUSH_FIELDS)
    # without DP nothing changes: the exact N, the local label counts, the batch's loss
    request, push = without_dp["requests"][0], without_dp["pushes"][0]
    assert request["local_examples"] == N and sum(request["label_counts"]) == N
    assert push["loss"] is not None and sum(push["label_counts"]) == push["batch_size"] == 16
