"""Stored enrollment keys: named, revocable keys besides the bootstrap one (kept only as SHA-256), each
with a quota of devices (issue 30, part 4: one key must not mint an unbounded number of Sybils), and
join codes: keys that expire (server/core/join_codes.py), shown once as a QR code by the console."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from server.core.errors import EnrollmentCodeExpired, InvalidInput, NotFound
from server.core.events import EnrollmentKeyCreated, EnrollmentKeyRevoked
from server.core.join_codes import canonical, lifetime_problem, new_code
from server.core.ports import EnrollmentKey, Store

__all__ = ["BOOTSTRAP", "BOOTSTRAP_KEY", "EnrollmentKey", "EnrollmentKeys", "KeyUse"]

# The bootstrap key's id on the devices it enrolls (FLEET_ENROLLMENT_KEY: one slot, whatever its secret)
BOOTSTRAP = "bootstrap"
BOOTSTRAP_KEY = EnrollmentKey(BOOTSTRAP, "bootstrap (FLEET_ENROLLMENT_KEY)", 0.0, "", None)


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
    from storage just before the revocation, so such a check cannot cache the key afterwards. Expiry
    is checked at every use, cached or not, against the injected clock."""

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
        return self._add(name, secrets.token_urlsafe(24), actor=actor, max_devices=max_devices)

    def create_join_code(self, minutes: int, *, actor: str, max_devices: int) -> tuple[EnrollmentKey, str]:
        """A key that enrolls at most ``max_devices`` devices for ``minutes`` from now, and its code
        (returned once). Devices it enrolled keep their tokens after it expires."""
        if problem := lifetime_problem(minutes, max_devices):
            raise InvalidInput(problem)
        now = self.clock()
        return self._add(
            f"join code ({minutes} min)", new_code(), actor=actor, max_devices=max_devices,
            expires_at=now + 60.0 * minutes, now=now,
        )  # fmt: skip

    def _add(
        self,
        name: str,
        secret: str,
        *,
        actor: str,
        max_devices: int | None,
        expires_at: float | None = None,
        now: float | None = None,
    ) -> tuple[EnrollmentKey, str]:
        at = self.clock() if now is None else now
        key = EnrollmentKey("k-" + secrets.token_hex(8), name, at, actor, None, max_devices, expires_at)
        self.store.commit(
            [EnrollmentKeyCreated(key.key_id, name, _digest(secret), actor, at, max_devices, expires_at)]
        )
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
        """Whether ``secret`` is a stored key neither revoked nor expired (may read storage: call off the
        loop)."""
        try:
            return self.resolve(secret) is not None
        except EnrollmentCodeExpired:
            return False

    def resolve(self, secret: str, *, bootstrap: bool = False) -> KeyUse | None:
        """The key ``secret`` is, if valid: the bootstrap key when the caller found it equal to
        FLEET_ENROLLMENT_KEY, else a stored key not revoked (may read storage: call off the loop). A
        stored key past its end raises ``EnrollmentCodeExpired``: the device is told, and stops."""
        if bootstrap:
            return KeyUse(BOOTSTRAP_KEY, _digest(secret))
        for digest in _digests(secret):
            key = self._valid.get(digest) or self._stored(digest)
            if key is None:
                continue
            if key.expired(self.clock()):
                with self._lock:
                    self._valid.pop(digest, None)
                raise EnrollmentCodeExpired(
                    f"the enrollment code {key.name!r} expired at {_utc(key.expires_at)} UTC; ask the "
                    "operator for a new one (devices it enrolled keep their tokens)"
                )
            return KeyUse(key, digest)
        return None

    def _stored(self, digest: str) -> EnrollmentKey | None:
        key = self.store.enrollment_key_by_hash(digest)
        if key is None or key.revoked_at is not None:
            return None
        with self._lock:
            if key.key_id in self._revoked:
                return None
            self._valid[digest] = key
        return key


def _digests(secret: str) -> Iterator[str]:
    """The hashes ``secret`` may be stored under: as given, then as the join code a person typed."""
    yield _digest(secret)
    code = canonical(secret)
    if code is not None and code != secret:
        yield _digest(code)


def _utc(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at or 0.0))
