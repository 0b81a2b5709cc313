"""Acknowledged vs stored: was every gradient the coordinator acknowledged applied, exactly once?

Read straight from the database after a run (no coordinator in between): each acknowledged task must
be stored as answered with the answer the device was given, and no model version may have been made by
two stored answers (a version made twice would mean a gradient applied twice, or one acknowledged
and lost then replaced after a crash).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import create_engine, select

from server.store.tables import ModelRow, TaskRow


def audit(database_url: str, acknowledged: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if database_url.startswith("postgresql://"):
        database_url = "postgresql+psycopg://" + database_url.removeprefix("postgresql://")
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(TaskRow.id, TaskRow.model_id, TaskRow.outcome).where(TaskRow.status == "applied")
            ).all()
            versions = dict(connection.execute(select(ModelRow.id, ModelRow.current_version)).all())
    finally:
        engine.dispose()
    stored = {row.id: row.outcome or {} for row in rows}
    lost = sorted(task for task in acknowledged if task not in stored)
    changed = sorted(
        task
        for task, answer in acknowledged.items()
        # a queued answer (scale-out) promised no version: the aggregator's applied row is what counts
        if task in stored
        and not answer.get("queued")
        and stored[task].get("version") != answer.get("version")
    )
    made = Counter(
        (row.model_id, (row.outcome or {}).get("version"))
        for row in rows
        if (row.outcome or {}).get("applied")
    )
    twice = sorted(f"{model}@{version}" for (model, version), n in made.items() if n > 1)
    return {
        "acknowledged": len(acknowledged),
        "stored_answers": len(stored),
        "acknowledged_not_stored": len(lost),
        "answer_changed": len(changed),
        "versions_made_twice": len(twice),
        "stored_not_acknowledged": len(set(stored) - set(acknowledged)),  # answered, the reply lost
        "model_versions": versions,
        "examples": {"lost": lost[:5], "changed": changed[:5], "twice": twice[:5]},
        "exactly_once": not (lost or changed or twice),
    }
