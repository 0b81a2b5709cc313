"""Console accounts: argon2-hashed passwords, server-side sessions, a CSRF token per session.

The cookie carries only a random session id; the database keeps its SHA-256, so a leaked database
opens no session, and logout or expiry ends it at once (a signed cookie could not be revoked).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from server.store.admin import AdminStore

USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
MIN_PASSWORD = 10


class AccountError(ValueError):
    """A username or password that cannot be used (shown to whoever tried)."""


@dataclass(frozen=True)
class ConsoleSession:
    username: str
    csrf_token: str


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Accounts:
    """Creates users, checks passwords, opens and resolves login sessions."""

    def __init__(
        self,
        store: AdminStore,
        *,
        session_seconds: float = 12 * 3600,
        clock: Callable[[], float] = time.time,
        hasher: PasswordHasher | None = None,
    ) -> None:
        self.store = store
        self.session_seconds = session_seconds
        self.clock = clock
        self.hasher = hasher or PasswordHasher()
        # verified against when the user does not exist, so a wrong name costs as long as a wrong password
        self._dummy_hash = self.hasher.hash(secrets.token_urlsafe(16))

    def create_user(self, username: str, password: str) -> None:
        if not USERNAME.match(username):
            raise AccountError("a username is 1-64 letters, digits or _.@-")
        if len(password) < MIN_PASSWORD:
            raise AccountError(f"a password has at least {MIN_PASSWORD} characters")
        if self.store.user(username) is not None:
            raise AccountError(f"user {username!r} already exists")
        self.store.add_user(username, self.hasher.hash(password), self.clock())

    def ensure_first_user(self, username: str, password: str) -> bool:
        """Create the first-run user (FLEET_CONSOLE_USER / _PASSWORD) when there are no users yet."""
        if self.store.user_count() > 0:
            return False
        self.create_user(username, password)
        return True

    def verify(self, username: str, password: str) -> bool:
        user = self.store.user(username) if USERNAME.match(username) else None
        try:
            self.hasher.verify(user.password_hash if user else self._dummy_hash, password)
        except (VerificationError, InvalidHashError):
            return False
        if user is None:
            return False
        if self.hasher.check_needs_rehash(user.password_hash):
            self.store.set_password_hash(username, self.hasher.hash(password))
        return True

    def open_session(self, username: str) -> tuple[str, ConsoleSession]:
        """(the cookie value, the session): the value is shown to the browser only."""
        cookie, csrf, now = secrets.token_urlsafe(32), secrets.token_urlsafe(32), self.clock()
        self.store.add_session(_digest(cookie), username, csrf, now, now + self.session_seconds)
        self.store.touch_login(username, now)
        return cookie, ConsoleSession(username, csrf)

    def session(self, cookie: str) -> ConsoleSession | None:
        found = self.store.session(_digest(cookie), self.clock())
        return None if found is None else ConsoleSession(found.username, found.csrf_token)

    def close_session(self, cookie: str) -> None:
        self.store.drop_session(_digest(cookie))
