"""The console's own rows: admin users, login sessions, the audit log and persisted setting changes.

Kept apart from ``SqlStore`` (the core's port): the core never reads these, and the console can be
switched off without the training path noticing. Same database, same engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from server.store.tables import Base


def _table(name: str) -> Table:
    return Base.metadata.tables[name]


@dataclass(frozen=True)
class AdminUser:
    username: str
    password_hash: str
    created_at: float
    last_login: float | None


@dataclass(frozen=True)
class AdminSession:
    username: str
    csrf_token: str
    expires_at: float


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: float
    actor: str
    action: str
    detail: dict[str, Any]


class AdminStore:
    """Users, sessions, audit entries and setting overrides, each in one short transaction."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.users_t = _table("admin_users")
        self.sessions_t = _table("admin_sessions")
        self.audit_t = _table("audit_log")
        self.overrides_t = _table("settings_overrides")

    # -- users ---------------------------------------------------------------------------------
    def user_count(self) -> int:
        with self.sessions() as s:
            return int(s.execute(select(func.count()).select_from(self.users_t)).scalar_one())

    def user(self, username: str) -> AdminUser | None:
        t = self.users_t
        with self.sessions() as s:
            row = s.execute(select(t).where(t.c.username == username)).mappings().first()
        if row is None:
            return None
        return AdminUser(row["username"], row["password_hash"], row["created_at"], row["last_login"])

    def users(self) -> list[AdminUser]:
        t = self.users_t
        with self.sessions() as s:
            rows = s.execute(select(t).order_by(t.c.username)).mappings().all()
        return [AdminUser(r["username"], r["password_hash"], r["created_at"], r["last_login"]) for r in rows]

    def add_user(self, username: str, password_hash: str, at: float) -> None:
        with self.sessions.begin() as s:
            s.execute(
                insert(self.users_t).values(username=username, password_hash=password_hash, created_at=at)
            )

    def set_password_hash(self, username: str, password_hash: str) -> None:
        t = self.users_t
        with self.sessions.begin() as s:
            s.execute(update(t).where(t.c.username == username).values(password_hash=password_hash))

    def touch_login(self, username: str, at: float) -> None:
        t = self.users_t
        with self.sessions.begin() as s:
            s.execute(update(t).where(t.c.username == username).values(last_login=at))

    # -- sessions ------------------------------------------------------------------------------
    def add_session(self, id_hash: str, username: str, csrf_token: str, at: float, expires_at: float) -> None:
        t = self.sessions_t
        with self.sessions.begin() as s:
            s.execute(delete(t).where(t.c.expires_at < at))  # sweep expired ones on each login
            s.execute(
                insert(t).values(
                    id_hash=id_hash,
                    username=username,
                    csrf_token=csrf_token,
                    created_at=at,
                    expires_at=expires_at,
                )
            )

    def session(self, id_hash: str, now: float) -> AdminSession | None:
        t = self.sessions_t
        with self.sessions() as s:
            row = s.execute(select(t).where(t.c.id_hash == id_hash, t.c.expires_at > now)).mappings().first()
        return None if row is None else AdminSession(row["username"], row["csrf_token"], row["expires_at"])

    def drop_session(self, id_hash: str) -> None:
        t = self.sessions_t
        with self.sessions.begin() as s:
            s.execute(delete(t).where(t.c.id_hash == id_hash))

    # -- audit log -----------------------------------------------------------------------------
    def audit(self, *, actor: str, action: str, detail: dict[str, Any], at: float) -> None:
        with self.sessions.begin() as s:
            s.execute(insert(self.audit_t).values(at=at, actor=actor[:64], action=action[:64], detail=detail))

    def audit_entries(self, *, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        t = self.audit_t
        query = select(t).order_by(t.c.id.desc()).limit(limit).offset(offset)
        with self.sessions() as s:
            rows = s.execute(query).mappings().all()
        return [AuditEntry(r["id"], r["at"], r["actor"], r["action"], r["detail"]) for r in rows]

    # -- settings changed at run time ----------------------------------------------------------
    def overrides(self) -> dict[str, Any]:
        t = self.overrides_t
        with self.sessions() as s:
            return {r["key"]: r["value"] for r in s.execute(select(t.c.key, t.c.value)).mappings()}

    def save_overrides(self, values: dict[str, Any], *, actor: str, at: float) -> None:
        """Upsert each key (a value of None is kept as a JSON null: 'the strategy's own default')."""
        t = self.overrides_t
        with self.sessions.begin() as s:
            for key, value in values.items():
                s.execute(delete(t).where(t.c.key == key))
                s.execute(insert(t).values(key=key, value=value, updated_at=at, updated_by=actor[:64]))
