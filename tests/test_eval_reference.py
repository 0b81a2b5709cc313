"""The reference evaluation (FLEET_EVAL_REFERENCE_AGE_S, issue 31's live demo): each evaluation also scores
the model as it was that long before on the same data, kept through the journal and migration 0011, and
drawn beside the live score in the console."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from alembic import command
from sqlalchemy import insert, select

from server.core.evaluation_loop import EvaluationLoop, ReferenceModels
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.store.tables import EvaluationRow
from tests.conftest import ADMIN
from tests.support.waiting import wait_until
from tests.test_console import console, login  # noqa: F401  (the console fixture)
from tests.test_console_core import alembic_config


def test_reference_models_hand_back_the_newest_snapshot_old_enough() -> None:
    refs = ReferenceModels(age_s=10.0, keep=5)  # a snapshot at most every 2 s
    for t in range(0, 13):
        assert (refs.at(float(t), "m") is None) == (t < 10)
        refs.add(float(t), "m", np.array([float(t)]))
    assert [s[0] for s in refs.snapshots][:2] == [2.0, 4.0]  # 0 let go once 2 was 10 s old; every 2 s kept
    assert refs.at(14.5, "m").tolist() == [4.0]
    assert refs.at(14.5, "other") is None  # another model's history is not a reference


class _Coordinator:
    def __init__(self) -> None:
        self.recorded: list[tuple[int, float, float | None]] = []
        self.snap = SimpleNamespace(model_id="m", version=1, params=np.array([1.0]), averaged=False)

    def snapshot(self) -> SimpleNamespace:
        return self.snap

    def record_evaluation(self, model_id, version, accuracy, loss, reference=None, served=None) -> None:  # noqa: ANN001
        self.recorded.append((version, accuracy, reference))


class _Evaluator:
    def evaluate(self, params: np.ndarray) -> tuple[float, float]:
        return float(params[0]), 0.0  # the "metric" is the parameter itself: which model was scored shows


def test_the_loop_scores_the_older_model_beside_the_newest() -> None:
    clock = [0.0]
    coordinator = _Coordinator()
    loop = EvaluationLoop(
        coordinator,  # type: ignore[arg-type]
        lambda _m: _Evaluator(),  # type: ignore[arg-type,return-value]
        every_versions=1, interval_s=1000, poll_s=0.005, reference_age_s=5.0, clock=lambda: clock[0],
    )  # fmt: skip
    loop.start()
    try:
        for version in range(1, 9):  # a version every simulated second
            clock[0] = float(version)
            coordinator.snap = SimpleNamespace(
                model_id="m", version=version, params=np.array([float(version)]), averaged=False
            )
            wait_until(lambda v=version: coordinator.recorded and coordinator.recorded[-1][0] == v)
    finally:
        loop.stop()
        loop.join(timeout=5)
    by_version = {v: (score, ref) for v, score, ref in coordinator.recorded}
    assert by_version[4] == (4.0, None)  # nothing 5 s old yet
    assert by_version[8][0] == 8.0 and by_version[8][1] is not None and by_version[8][1] <= 3.0


def test_the_reference_is_stored_and_migration_0011_leaves_old_rows_without(storage_url: str) -> None:
    engine = make_engine(storage_url)
    migrate(engine)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0010")
        old = {"model_id": "m", "version": 1, "accuracy": 0.5, "loss": 1.0, "at": 1.0}
        connection.execute(insert(EvaluationRow.__table__).values(**old))  # names no reference column
    migrate(engine)
    store = SqlStore(session_factory(engine))
    [before] = store.evaluations("m")
    assert before.accuracy == 0.5 and before.reference is None
    with engine.begin() as connection:
        connection.execute(
            insert(EvaluationRow.__table__).values(model_id="m", version=2, accuracy=0.6, loss=1.0, at=2.0,
                                                   reference=0.25)
        )  # fmt: skip
    assert [e.reference for e in store.evaluations("m")] == [None, 0.25]
    with engine.begin() as connection:  # and down again: the column goes, the rows stay
        command.downgrade(alembic_config(connection), "0010")
        assert connection.execute(select(EvaluationRow.__table__.c.version)).scalars().all() == [1, 2]
    migrate(engine)
    engine.dispose()


def test_the_console_draws_the_reference_beside_the_live_score(console) -> None:  # noqa: F811
    client = console(eval_reference_age_s=86.4, eval_reference_label="the model of a day before")
    login(client)
    coordinator = client.app.state.coordinator
    model = coordinator.run.model_id
    coordinator.record_evaluation(model, 3, 0.5, 1.0)
    coordinator.record_evaluation(model, 7, 0.75, 1.0, reference=0.25)
    chart = client.get("/admin/charts/accuracy-time").json()
    live, old = chart["data"]
    assert live["y"] == [0.5, 0.75] and old["y"] == [0.25] and old["name"] == "the model of a day before"
    assert chart["layout"]["showlegend"] is True
    rows = client.get("/admin/data/accuracy.json").json()
    assert rows["columns"][-1] == "reference"


def test_without_a_reference_the_chart_is_one_line(console) -> None:  # noqa: F811
    client = console()
    login(client)
    coordinator = client.app.state.coordinator
    coordinator.record_evaluation(coordinator.run.model_id, 3, 0.5, 1.0)
    assert len(client.get("/admin/charts/accuracy-time").json()["data"]) == 1


def test_the_api_lists_the_reference(storage_make_api) -> None:
    api = storage_make_api()
    model = api.coordinator.run.model_id
    api.coordinator.record_evaluation(model, 1, 0.4, 1.0)
    api.coordinator.record_evaluation(model, 2, 0.6, 0.9, reference=0.3)  # through the journal to SQL
    evaluations = api.http.get("/v1/admin/evaluations", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert [(e["accuracy"], e["reference"]) for e in evaluations] == [(0.4, None), (0.6, 0.3)]
