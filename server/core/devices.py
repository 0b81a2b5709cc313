"""Device enrollment and bearer-token authentication (tokens are stored only as SHA-256 hashes)."""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable

from server.core.enrollment import EnrollmentKeys
from server.core.errors import NotFound
from server.core.events import DeviceEnrolled, DeviceRevoked
from server.core.ports import EnrollmentKey, Store
from server.core.types import Device


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceRegistry:
    """Issues device identities and resolves tokens, caching the resolved devices in memory.

    Revocation drops a device from the cache; the lock orders it against an ``authenticate`` that read
    the device from storage just before, so that one cannot put it back."""

    def __init__(self, *, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self.keys = EnrollmentKeys(store=store, clock=clock)
        self._by_hash: dict[str, Device] = {}
        self._revoked: set[str] = set()  # device ids revoked by this process
        self._lock = threading.Lock()

    def enroll(self, device_model: str) -> tuple[Device, str]:
        device = Device(device_id="d-" + secrets.token_hex(8), device_model=device_model)
        token = secrets.token_urlsafe(32)
        digest = hash_token(token)
        self.store.commit([DeviceEnrolled(device.device_id, device_model, digest, self.clock())])
        with self._lock:  # every write to the cache holds it: ``revoke`` iterates the cache
            self._by_hash[digest] = device
        return device, token

    def cached(self, token: str) -> Device | None:
        """The device of a token already seen, without touching storage (None if not seen)."""
        return self._by_hash.get(hash_token(token))

    def authenticate(self, token: str) -> Device | None:
        digest = hash_token(token)
        device = self._by_hash.get(digest)
        if device is None:
            device = self.store.device_by_token(digest)  # None for a revoked device
            if device is None:
                return None
            with self._lock:
                if device.device_id in self._revoked:
                    return None
                self._by_hash[digest] = device
        return device

    def revoke(self, device_id: str, *, actor: str) -> None:
        """The device's token stops working now (idempotent; NotFound for an unknown device)."""
        record = self.store.device(device_id)
        if record is None:
            raise NotFound(f"no device {device_id!r}")
        if record.revoked_at is None:
            self.store.commit([DeviceRevoked(device_id, actor, self.clock())])
        with self._lock:
            self._revoked.add(device_id)
            for digest in [h for h, d in self._by_hash.items() if d.device_id == device_id]:
                del self._by_hash[digest]

    def count(self) -> int:
        return self.store.count_devices()

    # -- enrollment keys (server/core/enrollment.py) -------------------------------------------
    def create_enrollment_key(self, name: str, *, actor: str) -> tuple[EnrollmentKey, str]:
        """A new stored key and its secret (shown once)."""
        return self.keys.create(name, actor=actor)

    def enrollment_keys(self) -> list[EnrollmentKey]:
        return self.keys.list()

    def revoke_enrollment_key(self, key_id: str, *, actor: str) -> None:
        self.keys.revoke(key_id, actor=actor)

    def enrollment_key_valid(self, secret: str) -> bool:
        """Whether ``secret`` is a stored, non-revoked key (reads storage: call it off the event loop)."""
        return self.keys.valid(secret)
