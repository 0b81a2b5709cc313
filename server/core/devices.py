"""Device enrollment and bearer-token authentication (tokens are stored only as SHA-256 hashes)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable

from server.core.events import DeviceEnrolled
from server.core.ports import Store
from server.core.types import Device


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceRegistry:
    """Issues device identities and resolves tokens, caching the resolved devices in memory."""

    def __init__(self, *, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._by_hash: dict[str, Device] = {}

    def enroll(self, device_model: str) -> tuple[Device, str]:
        device = Device(device_id="d-" + secrets.token_hex(8), device_model=device_model)
        token = secrets.token_urlsafe(32)
        digest = hash_token(token)
        self.store.commit([DeviceEnrolled(device.device_id, device_model, digest, self.clock())])
        self._by_hash[digest] = device
        return device, token

    def cached(self, token: str) -> Device | None:
        """The device of a token already seen, without touching storage (None if not seen)."""
        return self._by_hash.get(hash_token(token))

    def authenticate(self, token: str) -> Device | None:
        digest = hash_token(token)
        device = self._by_hash.get(digest)
        if device is None:
            device = self.store.device_by_token(digest)
            if device is None:
                return None
            self._by_hash[digest] = device
        return device

    def count(self) -> int:
        return self.store.count_devices()
