"""The state the journal saves with every batch: the strategy's and the profiler's, one row each per
model or device model (UPDATE first, INSERT when there was none: portable across SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from server.store.codec import decode_state, encode_state
from server.store.tables import ProfilerRow, StrategyRow

# the journal saves the strategy and the profiles with every batch: statements built once (their cache key
# is derived again for every new construct)
_STRATEGY, _PROFILES = StrategyRow.__table__, ProfilerRow.__table__
SET_STRATEGY = (
    update(_STRATEGY)
    .where(_STRATEGY.c.model_id == bindparam("m"))
    .values(state=bindparam("state"), updated_at=bindparam("at"))
)
SET_PROFILES = (
    update(_PROFILES)
    .where(_PROFILES.c.key == bindparam("k"))
    .values(state=bindparam("state"), updated_at=bindparam("updated_at"))
)


def save_strategy_state(*, session: Session, model_id: str, state: dict[str, Any], now: float) -> None:
    """UPDATE, then INSERT if the model has no saved state yet."""
    data = encode_state(state)
    if not session.execute(SET_STRATEGY, {"m": model_id, "state": data, "at": now}).rowcount:  # type: ignore[attr-defined]
        session.execute(insert(_STRATEGY).values(model_id=model_id, state=data, updated_at=now))


def load_strategy_state(*, session: Session, model_id: str) -> dict[str, Any] | None:
    row = session.get(StrategyRow, model_id)
    return None if row is None else decode_state(row.state)


def save_profiler_states(*, session: Session, states: dict[str, dict[str, Any]], now: float) -> None:
    """Many profiles in one UPDATE (executemany), then INSERT the keys that were not there yet."""
    if not states:
        return
    table = _PROFILES
    rows = [{"k": k, "state": v, "updated_at": now} for k, v in states.items()]
    matched = session.execute(SET_PROFILES, rows).rowcount  # type: ignore[attr-defined]
    if matched == len(rows):
        return
    present = set(session.scalars(select(table.c.key).where(table.c.key.in_(list(states)))))
    missing = [{"key": k, "state": v, "updated_at": now} for k, v in states.items() if k not in present]
    if missing:
        session.execute(insert(table), missing)


def load_profiler_states(*, session: Session) -> dict[str, dict[str, Any]]:
    return {r.key: r.state for r in session.scalars(select(ProfilerRow))}
