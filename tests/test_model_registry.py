"""Models like a registry (issue 29): rollbacks are their own head change and undo promotions newest
first (never re-applying one), each version records where it came from and can carry a note, a new
head is evaluated at once, and migration 0009 carries old rows over. On memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from sqlalchemy import insert, select

from models.manifest import builtin
from server.core.coordinator import Coordinator
from server.core.errors import Conflict, InvalidInput, NotFound
from server.core.evaluation import Evaluator
from server.core.lineage import MAX_NOTE, head_history
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.store.tables import PromotionRow, VersionRow
from server.strategies import make_strategy
from sim.data import load_mnist
from sim.harness import BatchSizer
from tests.support.stores import BACKENDS, started_cores, store_factory
from tests.test_console_core import alembic_config, grant, push


@pytest.fixture(params=BACKENDS)
def make_core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Coordinator]]:
    """Factory of started coordinators (an mlp, fedavg-async with K = 1) on one storage: a restart."""
    options = {
        "profiler": BatchSizer(mean=10),
        "strategy_factory": lambda: make_strategy("fedavg-async", learning_rate=0.1, k=1),
    }
    with store_factory(request.param, tmp_path) as make_store, started_cores(make_store) as make:
        yield lambda: make(**options)


def lineage(core: Coordinator) -> list[tuple[int, str, int | None]]:
    return [(r.version, r.origin, r.source_version) for r in core.catalog.versions(core.run.model_id)]


def test_rollbacks_undo_promotions_newest_first_and_never_reapply_one(make_core):
    core = make_core()
    model_id = core.run.model_id
    device, _ = core.enroll("Pixel")
    for _ in range(3):
        push(core, device, grant(core, device))
    assert core.promote(model_id, 0, actor="alice") == (model_id, 4)  # P1 replaces v3
    push(core, device, grant(core, device))  # v5
    assert core.promote(model_id, 2, actor="alice") == (model_id, 6)  # P2 replaces v5
    v3, v5 = core.catalog.params(model_id, 3).copy(), core.catalog.params(model_id, 5).copy()

    assert core.rollback(actor="bob") == (model_id, 7)  # undoes P2: v5 comes back
    np.testing.assert_array_equal(core.catalog.params(model_id, 7), v5)
    history = head_history(core.store)
    assert (history.last.kind, history.last.source_version, history.last.previous_version) == (
        "rollback",
        5,
        6,
    )
    assert (history.undone.version, history.undo.version) == (6, 4)  # next: undo P1, not redo P2

    restarted = make_core()  # what a rollback undoes is read back from storage
    assert restarted.rollback(actor="bob") == (model_id, 8)  # undoes P1: v3 comes back
    np.testing.assert_array_equal(restarted.catalog.params(model_id, 8), v3)
    np.testing.assert_array_equal(restarted.run.params, v3)
    with pytest.raises(Conflict, match="nothing to roll back"):
        restarted.rollback(actor="bob")
    assert [c.kind for c in restarted.store.head_changes()] == [
        "promotion",
        "promotion",
        "rollback",
        "rollback",
    ]
    assert lineage(restarted) == [
        (0, "initial", None),
        (1, "trained", 0),
        (2, "trained", 1),
        (3, "trained", 2),
        (4, "promotion", 0),
        (5, "trained", 4),
        (6, "promotion", 2),
        (7, "rollback", 5),
        (8, "rollback", 3),
    ]


def test_notes_are_set_on_a_head_change_edited_later_and_validated(make_core):
    core = make_core()
    model_id = core.run.model_id
    device, _ = core.enroll("Pixel")
    push(core, device, grant(core, device))
    core.promote(model_id, 0, actor="alice", note="  back to the bundle: v1 diverged \n")
    core.annotate(model_id, 1, "diverged <b>fast</b>", actor="alice")
    notes = {r.version: r.note for r in make_core().catalog.versions(model_id)}  # survives a restart
    assert notes == {0: None, 1: "diverged <b>fast</b>", 2: "back to the bundle: v1 diverged"}
    core.annotate(model_id, 1, "   ", actor="alice")  # blank clears it
    assert core.catalog.versions(model_id)[1].note is None
    with pytest.raises(InvalidInput, match="at most"):
        core.annotate(model_id, 1, "x" * (MAX_NOTE + 1), actor="alice")
    with pytest.raises(InvalidInput, match="control"):
        core.rollback(actor="bob", note="bell \x07")
    with pytest.raises(NotFound):
        core.annotate(model_id, 99, "no such version", actor="alice")
    assert core.run.version == 2  # the refused rollback changed nothing


def test_a_new_head_is_evaluated_at_once_and_the_stop_rule_waits(make_core):
    core = make_core()
    model_id = core.run.model_id
    device, _ = core.enroll("Pixel")
    push(core, device, grant(core, device))
    test = load_mnist(train_size=4900)[1]
    evaluator = Evaluator(
        core.catalog.manifest(model_id), core.catalog.graph(model_id, "infer"), test.x, test.y
    )
    core.evaluate_params = lambda _, params: evaluator.evaluate(params)
    core.promote(model_id, 1, actor="alice")  # v1 was never evaluated: the evaluator scores v2
    accuracy = {e.version: e.accuracy for e in core.store.evaluations(model_id)}
    assert accuracy == {2: pytest.approx(evaluator.evaluate(core.catalog.params(model_id, 1))[0])}

    core.evaluate_params = None  # no evaluator: a known evaluation of the same parameters is copied
    core.record_evaluation(model_id, 0, 0.93, 0.2)
    core.set_stop(target_accuracy=0.9, max_versions=None)
    core.promote(model_id, 0, actor="alice")
    assert core.store.latest_evaluation(model_id).accuracy == 0.93
    assert core.store.latest_evaluation(model_id).version == 3 and core.run.status == "training"


def test_migration_0009_reads_old_rows_as_trained_versions_and_promotions(storage_url):
    engine = make_engine(storage_url)
    store = SqlStore(session_factory(engine))
    migrate(engine)
    core = Coordinator(
        store=store,
        profiler=BatchSizer(mean=10),
        strategy_factory=lambda: make_strategy("fedavg-async", learning_rate=0.1, k=1),
    )
    core.start()
    model_id = core.add_model(builtin("mlp"), actor="test").model_id
    core.close()
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0008")
        connection.execute(  # a rollback as 0008 stored it: a promotion
            insert(VersionRow.__table__).values(model_id=model_id, version=1, params=b"", created_at=2.0)
        )
        row = {"model_id": model_id, "version": 1, "source_version": 0, "actor": "a", "at": 2.0}
        connection.execute(
            insert(PromotionRow.__table__).values(**row, previous_model_id=model_id, previous_version=0)
        )
    migrate(engine)
    assert [(r.version, r.origin, r.source_version, r.note) for r in store.versions(model_id)] == [
        (0, "initial", None, None),
        (1, "trained", 0, None),
    ]
    assert [c.kind for c in store.head_changes()] == ["promotion"]
    with engine.connect() as connection:
        assert connection.execute(select(PromotionRow.__table__.c.kind)).scalar_one() == "promotion"
    engine.dispose()
