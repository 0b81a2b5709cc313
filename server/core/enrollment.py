"""Stored enrollment keys: named, revocable keys besides the bootstrap one (kept only as SHA-256)."""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable

from server.core.errors import NotFound
from server.core.events import EnrollmentKeyCreated, EnrollmentKeyRevoked
from server.core.ports import EnrollmentKey, Store

__all__ = ["EnrollmentKey", "EnrollmentKeys"]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class EnrollmentKeys:
    """Creates, lists, revokes and checks stored keys; remembers the hashes of keys found valid.

    A revocation here drops the hash at once; the lock orders it against a check that read the key
    from storage just before the revocation, so such a check cannot cache the key afterwards."""

    def __init__(self, *, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._valid: dict[str, str] = {}  # key hash -> key id
        self._revoked: set[str] = set()  # key ids revoked by this process
        self._lock = threading.Lock()

    def create(self, name: str, *, actor: str) -> tuple[EnrollmentKey, str]:
        """A new key and its secret (returned once: only its SHA-256 is stored)."""
        secret = secrets.token_urlsafe(24)
        key = EnrollmentKey("k-" + secrets.token_hex(8), name, self.clock(), actor, None)
        event = EnrollmentKeyCreated(key.key_id, name, _digest(secret), actor, key.created_at)
        self.store.commit([event])
        return key, secret

    def list(self) -> list[EnrollmentKey]:
        return self.store.enrollment_keys()

    def revoke(self, key_id: str, *, actor: str) -> None:
        """The key stops enrolling devices now (devices it enrolled keep their tokens). Idempotent."""
        key = next((k for k in self.store.enrollment_keys() if k.key_id == key_id), None)
        if key is None:
            raise NotFound(f"no enrollment key {key_id!r}")
        if key.revoked_at is None:
            self.store.commit([EnrollmentKeyRevoked(key_id, actor, self.clock())])
        with self._lock:
            self._revoked.add(key_id)
            for digest in [h for h, k in self._valid.items() if k == key_id]:
                del self._valid[digest]

    def valid(self, secret: str) -> bool:
        """Whether ``secret`` is a stored key that is not revoked (may read storage: call off the loop)."""
        digest = _digest(secret)
        if digest in self._valid:
            return True
        key = self.store.enrollment_key_by_hash(digest)
        if key is None or key.revoked_at is not None:
            return False
        with self._lock:
            if key.key_id in self._revoked:
                return False
            self._valid[digest] = key.key_id
        return True
