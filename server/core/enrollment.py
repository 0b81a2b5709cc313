"""Stored enrollment keys: named, revocable keys besides the bootstrap one (kept only as SHA-256), each
with a quota of devices (issue 30, part 4: one key must not mint an unbounded number of Sybils)."""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from server.core.errors import InvalidInput, NotFound
from server.core.events import EnrollmentKeyCreated, EnrollmentKeyRevoked
from server.core.ports import EnrollmentKey, Store

__all__ = ["BOOTSTRAP", "EnrollmentKey", "EnrollmentKeys", "KeyUse"]

# The bootstrap key's id on the devices it enrolls (FLEET_ENROLLMENT_KEY: one slot, whatever its secret)
BOOTSTRAP = "bootstrap"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class KeyUse:
    """A valid key as an enrollment presents it: the key (its id and quota) and its secret's SHA-256,
    which the attestation token is bound to (server/core/attestation.py)."""

    key: EnrollmentKey
    secret_hash: str


class EnrollmentKeys:
    """Creates, lists, revokes and checks stored keys; remembers the hashes of keys found valid.

    A revocation here drops the hash at once; the lock orders it against a check that read the key
    from storage just before the revocation, so such a check cannot cache the key afterwards."""

    def __init__(self, *, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._valid: dict[str, EnrollmentKey] = {}  # key hash -> key
        self._revoked: set[str] = set()  # key ids revoked by this process
        self._lock = threading.Lock()

    def create(self, name: str, *, actor: str, max_devices: int | None = None) -> tuple[EnrollmentKey, str]:
        """A new key and its secret (returned once: only its SHA-256 is stored). ``max_devices``: its
        quota (None: the coordinator's default, FLEET_ENROLL_QUOTA_PER_KEY, at each enrollment)."""
        if max_devices is not None and max_devices < 1:
            raise InvalidInput(f"a key's quota must be at least 1 device, not {max_devices}")
        secret = secrets.token_urlsafe(24)
        key = EnrollmentKey("k-" + secrets.token_hex(8), name, self.clock(), actor, None, max_devices)
        event = EnrollmentKeyCreated(key.key_id, name, _digest(secret), actor, key.created_at, max_devices)
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
            for digest in [h for h, k in self._valid.items() if k.key_id == key_id]:
                del self._valid[digest]

    def valid(self, secret: str) -> bool:
        """Whether ``secret`` is a stored key that is not revoked (may read storage: call off the loop)."""
        return self.resolve(secret) is not None

    def resolve(self, secret: str, *, bootstrap: bool = False) -> KeyUse | None:
        """The key ``secret`` is, if valid: the bootstrap key when the caller found it equal to
        FLEET_ENROLLMENT_KEY, else a stored key not revoked (may read storage: call off the loop)."""
        digest = _digest(secret)
        if bootstrap:
            return KeyUse(EnrollmentKey(BOOTSTRAP, "bootstrap (FLEET_ENROLLMENT_KEY)", 0.0, "", None), digest)
        cached = self._valid.get(digest)
        if cached is not None:
            return KeyUse(cached, digest)
        key = self.store.enrollment_key_by_hash(digest)
        if key is None or key.revoked_at is not None:
            return None
        with self._lock:
            if key.key_id in self._revoked:
                return None
            self._valid[digest] = key
        return KeyUse(key, digest)
