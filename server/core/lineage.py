"""Lineage of the head: which version each version came from, what a rollback undoes, operator notes.

Promotions and rollbacks are both head changes (``HeadPromoted``, ``kind`` "promotion" or "rollback"),
but a rollback is an undo, not another promotion: rollbacks undo promotions newest first, like an undo
stack, so a second rollback undoes the promotion before (if any) and never re-applies the one just
undone. Redoing it is an explicit promotion of the head the rollback left.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from server.core.errors import InvalidInput
from server.core.ports import PromotionRecord, Store, VersionRecord

MAX_NOTE = 500  # characters: a line or two of context, not a changelog
ORIGINS = ("initial", "trained", "promotion", "rollback")


def clean_note(note: str | None) -> str | None:
    """A note as stored: trimmed plain text of at most ``MAX_NOTE`` characters, None when empty.

    InvalidInput for a longer note or one with control characters (line breaks and tabs are fine):
    notes are shown in the console (escaped) and listed by the API, so they stay printable."""
    if note is None:
        return None
    text = note.replace("\r\n", "\n").strip()
    if not text:
        return None
    if len(text) > MAX_NOTE:
        raise InvalidInput(f"a note has at most {MAX_NOTE} characters ({len(text)} given)")
    if any(unicodedata.category(c).startswith("C") and c not in "\n\t" for c in text):
        raise InvalidInput("a note is plain text: no control characters")
    return text


def version_record(
    version: int, created_at: float, origin: str | None, source_version: int | None, note: str | None
) -> VersionRecord:
    """A stored version row as the core lists it: a row without an origin was trained on the version
    below (or is version 0, the bundle's parameters)."""
    if origin is None:
        origin, source_version = ("initial", None) if version == 0 else ("trained", version - 1)
    return VersionRecord(version, created_at, origin, source_version, note)


def rollback_target(changes: Sequence[PromotionRecord]) -> PromotionRecord | None:
    """The promotion a rollback undoes: the newest one no rollback undid yet (None: nothing to undo)."""
    return _replay(changes)[0]


def _replay(changes: Sequence[PromotionRecord]) -> tuple[PromotionRecord | None, PromotionRecord | None]:
    """(the promotion a rollback would undo now, the one the last change undid if it was a rollback)."""
    pending: list[PromotionRecord] = []
    undone = None
    for change in changes:
        undone = None
        if change.kind != "rollback":
            pending.append(change)
        elif pending:
            undone = pending.pop()
    return (pending[-1] if pending else None), undone


@dataclass(frozen=True)
class HeadHistory:
    """What the console shows and offers: the newest head change, the promotion it undid (when it is a
    rollback), and the promotion a rollback would undo now (None: no rollback to offer)."""

    last: PromotionRecord | None
    undone: PromotionRecord | None
    undo: PromotionRecord | None


def head_history(store: Store) -> HeadHistory:
    changes = store.head_changes()
    undo, undone = _replay(changes)
    return HeadHistory(changes[-1] if changes else None, undone, undo)
