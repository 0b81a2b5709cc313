"""serving-average: the server serves a moving average of the versions while devices train the newest."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
from alembic import command
from sqlalchemy import inspect

from models.manifest import builtin
from server.compose import build_strategy
from server.core.evaluation_loop import EvaluationLoop
from server.settings import Settings
from server.store.codec import decode_state, encode_state
from server.store.database import make_engine, migrate
from server.strategies import Arrival, FedBuff, FedBuffEqual
from server.strategies.serving_average import ServingAverage
from tests.support.waiting import wait_until
from tests.test_console_core import alembic_config


def arrival(gradient, task: str = "t") -> Arrival:
    return Arrival(task, "d", 0, 0, np.asarray(gradient, np.float32), np.array([1, 1]), 2, 1.0, 0.0)


def step(strategy, params, gradient):
    strategy.receive(arrival(gradient))
    return strategy.aggregate(params)


def test_the_average_follows_the_versions_by_hand():
    strategy = ServingAverage(FedBuff(learning_rate=1.0, k=1), decay=0.5)
    p0 = np.zeros(2, np.float32)
    assert strategy.serving(p0) is p0  # no update yet: the parameters themselves
    p1 = step(strategy, p0, [-2.0, 0.0])  # θ = (2, 0)
    np.testing.assert_allclose(strategy.serving(p1), [1.0, 0.0])  # ½·θ0 + ½·θ1
    p2 = step(strategy, p1, [-2.0, -4.0])  # θ = (4, 4)
    np.testing.assert_allclose(strategy.serving(p2), [2.5, 2.0])  # ½·(1, 0) + ½·(4, 4)
    np.testing.assert_array_equal(p2, [4.0, 4.0])  # devices are handed the newest, unaveraged


def test_parameters_set_from_outside_are_served_as_they_are_and_start_a_new_average():
    strategy = ServingAverage(FedBuff(learning_rate=1.0, k=1), decay=0.5)
    p1 = step(strategy, np.zeros(2, np.float32), [-2.0, 0.0])
    rolled_back = np.array([10.0, 10.0], np.float32)  # a promotion or rollback replaced the parameters
    assert strategy.serving(rolled_back) is rolled_back
    np.testing.assert_allclose(strategy.serving(p1.copy()), [1.0, 0.0])  # an equal copy: reloaded, averaged
    p2 = step(strategy, rolled_back, [-2.0, 0.0])  # θ = (12, 10): the average restarts from (10, 10)
    np.testing.assert_allclose(strategy.serving(p2), [11.0, 10.0])
    assert strategy.serving(np.zeros(3, np.float32)).shape == (3,)  # another model's parameters


def test_the_average_survives_persistence():
    strategy = ServingAverage(FedBuff(learning_rate=1.0, k=1), decay=0.9)
    params = np.zeros(3, np.float32)
    for g in ([-1.0, 0.0, 1.0], [0.5, -2.0, 0.0]):
        params = step(strategy, params, g)
    restored = ServingAverage(FedBuff(learning_rate=1.0, k=1), decay=0.9)
    restored.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    np.testing.assert_array_equal(restored.serving(params.copy()), strategy.serving(params))
    np.testing.assert_array_equal(step(restored, params.copy(), [1, 1, 1]), step(strategy, params, [1, 1, 1]))
    np.testing.assert_allclose(restored.serving(restored._last), strategy.serving(strategy._last))


def test_the_default_strategy_takes_it_as_a_setting_and_the_settings_as_a_wrapper():
    averaged = FedBuffEqual()  # the default serves an average
    plain = FedBuffEqual(serving_average=None)
    params = np.ones(4, np.float32)
    for _ in range(5):
        averaged.receive(arrival([1.0, 0.0, 0.0, 0.0]))
        plain.receive(arrival([1.0, 0.0, 0.0, 0.0]))
    new = averaged.aggregate(params)
    assert np.array_equal(new, plain.aggregate(params))  # the same training step
    assert not np.array_equal(averaged.serving(new), new) and plain.serving(new) is new
    wrapped = build_strategy(Settings(_env_file=None, strategy="fedbuff", wrappers=["serving-average"]))
    assert isinstance(wrapped, ServingAverage) and wrapped.decay == 0.9


def test_the_api_exports_and_evaluates_the_served_average(make_api):
    api = make_api(strategy={"name": "fedbuff", "k": 1}, wrappers=["serving-average"])
    headers = api.enroll()
    run = api.coordinator.run
    for _ in range(2):
        task = api.task(headers).json()
        assert api.push(headers, task["task_id"], np.full(run.manifest.num_params, 1e-2)).status_code == 200
    snapshot = api.coordinator.snapshot()
    assert snapshot is not None and snapshot.averaged and snapshot.version == run.version == 2
    np.testing.assert_array_equal(snapshot.params, run.strategy.serving(run.params))
    assert not np.allclose(snapshot.params, run.params)
    url = f"/v1/models/{run.model_id}/inference.onnx"
    head = api.http.get(url)
    assert head.status_code == 200 and head.headers["cache-control"] == "no-cache"  # the next update moves it
    old = api.http.get(url + "?version=1")
    assert "immutable" in old.headers["cache-control"]  # an older version, as trained
    x = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)
    bundle = builtin("mnist_cnn")
    reference = ort.InferenceSession(bundle.infer_onnx, providers=["CPUExecutionProvider"])
    exported = ort.InferenceSession(head.content, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    expected = reference.run(None, {**bundle.manifest.split(snapshot.params), "x": x})[0]
    np.testing.assert_allclose(exported, expected, rtol=1e-5, atol=1e-6)


def test_an_evaluated_version_keeps_the_average_it_was_scored_as(storage_make_api):
    """Downloading an evaluated version later gives the model the console recorded (the served
    average, kept with the version); a version never evaluated is served as trained."""
    api = storage_make_api(strategy={"name": "fedbuff", "k": 1}, wrappers=["serving-average"])
    headers = api.enroll()
    coordinator, run = api.coordinator, api.coordinator.run
    scored = []
    loop = EvaluationLoop(
        coordinator,
        lambda _m: SimpleNamespace(evaluate=lambda p: scored.append(p.copy()) or (0.5, 1.0)),  # type: ignore[arg-type]
        every_versions=2, interval_s=1000, poll_s=0.005,
    )  # fmt: skip
    loop.start()
    try:  # version 0 scored first, so that the loop's count starts there however late it first looks
        wait_until(lambda: [e["version"] for e in coordinator.evaluations(run.model_id)][-1:] == [0])
        for version in range(1, 5):
            task = api.task(headers).json()
            gradient = np.full(run.manifest.num_params, 1e-2)
            assert api.push(headers, task["task_id"], gradient).status_code == 200
            if version % 2 == 0:  # the loop scores every second version
                wait_until(lambda v=version: coordinator.evaluations(run.model_id)[-1]["version"] == v)
    finally:
        loop.stop()
        loop.join(timeout=5)
    evaluated = [e["version"] for e in coordinator.evaluations(run.model_id)]
    assert 2 in evaluated and 3 not in evaluated
    url = f"/v1/models/{run.model_id}/served"
    kept = api.http.get(url, params={"version": 2})
    assert kept.headers["fleet-served"] == "average" and "immutable" in kept.headers["cache-control"]
    np.testing.assert_array_equal(np.frombuffer(kept.content, "<f4"), scored[evaluated.index(2)])
    assert not np.allclose(np.frombuffer(kept.content, "<f4"), coordinator.catalog.params(run.model_id, 2))
    trained = api.http.get(url, params={"version": 3})
    assert trained.headers["fleet-served"] == "trained"
    np.testing.assert_array_equal(
        np.frombuffer(trained.content, "<f4"), coordinator.catalog.params(run.model_id, 3)
    )
    head = api.http.get(url)
    assert (head.headers["fleet-version"], head.headers["fleet-served"]) == ("4", "average")
    assert head.headers["cache-control"] == "no-cache"
    np.testing.assert_array_equal(np.frombuffer(head.content, "<f4"), coordinator.snapshot().params)
    # the download of version 2 scores as the kept average does
    x = np.random.default_rng(1).random((2, 1, 28, 28), dtype=np.float32)
    bundle = builtin("mnist_cnn")
    reference = ort.InferenceSession(bundle.infer_onnx, providers=["CPUExecutionProvider"])
    onnx_file = api.http.get(f"/v1/models/{run.model_id}/inference.onnx", params={"version": 2}).content
    exported = ort.InferenceSession(onnx_file, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    expected = reference.run(None, {**bundle.manifest.split(np.frombuffer(kept.content, "<f4")), "x": x})[0]
    np.testing.assert_allclose(exported, expected, rtol=1e-5, atol=1e-6)
    # promoted, version 2 trains on as it was scored, and the new head's copied evaluation describes it
    model, head = coordinator.promote(run.model_id, 2, actor="test")
    np.testing.assert_array_equal(coordinator.catalog.params(model, head), np.frombuffer(kept.content, "<f4"))
    assert coordinator.evaluations(model)[-1]["version"] == head


def test_migration_0013_adds_the_served_column_and_goes_down_again(storage_url):
    engine = make_engine(storage_url)
    migrate(engine)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0012")
        assert "served" not in {c["name"] for c in inspect(connection).get_columns("model_versions")}
    migrate(engine)
    with engine.begin() as connection:
        assert "served" in {c["name"] for c in inspect(connection).get_columns("model_versions")}
    engine.dispose()
