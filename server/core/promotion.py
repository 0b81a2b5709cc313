"""Promotion: a retained version's parameters become the head that trains, as a new version on top.

Versions only grow: promoting (model, v) writes v's parameters (as v was evaluated: its served average,
when one was kept) again as the model's newest version + 1, so what devices cached under a version number
never changes meaning. The model becomes the active one and trains on from there with a fresh strategy
(what it had buffered was computed on other parameters). Tasks granted before the promotion are refused
with 410 (``superseded``): devices treat that as a lost task and ask again. A rollback writes the head a
promotion replaced the same way, as its own kind of head change (server/core/lineage.py: what it undoes,
and each version's lineage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet_protocol import Manifest
from server.core.catalog import Catalog
from server.core.errors import Gone
from server.core.events import HeadPromoted
from server.core.leases import Lease
from server.core.ports import ModelRecord, Store, Strategy
from server.core.run import TrainingRun

SUPERSEDED = "the model was promoted after this task was granted"


@dataclass(frozen=True)
class Candidate:
    """What a promotion reads from storage, before it takes the coordinator's lock."""

    record: ModelRecord
    manifest: Manifest
    params: bytes
    source_version: int


def candidate(catalog: Catalog, model_id: str, version: int, *, retention: int) -> Candidate:
    """The version to promote: NotFound for an unknown model or version, Gone past retention. A version
    evaluated as a served average (``Catalog.as_evaluated``) is taken as it was scored, so the new head
    is the model its evaluation describes (``_evaluate_new_head`` copies that evaluation)."""
    params = catalog.as_evaluated(model_id, version)[0].tobytes()
    record = catalog.record(model_id)
    if 0 < version <= record.current_version - retention:  # still in the cache, no longer in storage
        raise Gone(f"version {version} of {model_id} is past the retention window")
    return Candidate(record, catalog.manifest(model_id), params, version)


def promoted(
    run: TrainingRun,
    chosen: Candidate,
    strategy: Strategy,
    *,
    actor: str,
    at: float,
    kind: str = "promotion",
    note: str | None = None,
) -> tuple[TrainingRun, HeadPromoted]:
    """The run that trains from the promoted (or restored: ``kind`` "rollback") parameters, and the event
    that stores them."""
    record = chosen.record
    same = record.model_id == run.model_id
    version = (run.version if same else record.current_version) + 1
    new_run = TrainingRun(
        model_id=record.model_id,
        manifest=chosen.manifest,
        params=np.frombuffer(chosen.params, dtype="<f4").astype(np.float32),
        version=version,
        status="training",
        strategy=strategy,
        stop_accuracy=run.stop_accuracy if same else record.stop_accuracy,
        stop_versions=run.stop_versions if same else record.stop_versions,
        floor=version,
    )
    event = HeadPromoted(
        model_id=record.model_id,
        version=version,
        source_version=chosen.source_version,
        params=chosen.params,
        previous_model_id=run.model_id,
        previous_version=run.version,
        actor=actor,
        at=at,
        kind=kind,
        note=note,
    )
    return new_run, event


def superseded(run: TrainingRun, lease: Lease) -> bool:
    """Whether a promotion replaced the head after ``lease`` was granted: its gradient is for old
    parameters (of this model below the promoted version, or of the model that was replaced)."""
    return run.floor > 0 and (lease.model_id != run.model_id or lease.version < run.floor)


def floor_of(store: Store, model_id: str) -> int:
    """The version the last promotion made ``model_id``'s head (0 if it was not the last promoted):
    after a restart, tasks granted on older versions are still refused."""
    last = store.last_promotion()
    return last.version if last is not None and last.model_id == model_id else 0
