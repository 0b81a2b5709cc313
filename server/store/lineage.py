"""Reads and writes of the versions' lineage and notes, and of the head changes (promotions and
rollbacks): the SQL side of server/core/lineage.py, apart from repository.py to keep each file short."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from server.core.events import VersionNoted
from server.core.lineage import version_record
from server.core.ports import PromotionRecord, VersionRecord
from server.store.tables import AuditRow, PromotionRow, VersionRow


def list_versions(session: Session, model_id: str) -> list[VersionRecord]:
    """The retained versions, oldest first (the parameters are not read)."""
    rows = session.execute(
        select(
            VersionRow.version,
            VersionRow.created_at,
            VersionRow.origin,
            VersionRow.source_version,
            VersionRow.note,
        )
        .where(VersionRow.model_id == model_id)
        .order_by(VersionRow.version)
    )
    return [version_record(int(v), float(t), o, s, n) for v, t, o, s, n in rows]


def promotion_record(row: PromotionRow) -> PromotionRecord:
    return PromotionRecord(
        model_id=row.model_id,
        version=row.version,
        source_version=row.source_version,
        previous_model_id=row.previous_model_id,
        previous_version=row.previous_version,
        actor=row.actor,
        at=row.at,
        kind=row.kind,
    )


def head_changes(session: Session) -> list[PromotionRecord]:
    """Every promotion and rollback, oldest first: a row per operator action, so a few."""
    return [promotion_record(r) for r in session.scalars(select(PromotionRow).order_by(PromotionRow.id))]


def write_note(session: Session, event: VersionNoted) -> None:
    """The version's note, and an audit entry with the note it replaced."""
    where = (VersionRow.model_id == event.model_id, VersionRow.version == event.version)
    old = session.scalar(select(VersionRow.note).where(*where))
    session.execute(update(VersionRow).where(*where).values(note=event.note))
    detail = {"model_id": event.model_id, "version": event.version, "old": old, "new": event.note}
    session.add(AuditRow(at=event.at, actor=event.actor[:64], action="version_noted", detail=detail))
