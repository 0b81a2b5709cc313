"""Device enrollment and bearer-token authentication (tokens are stored only as SHA-256 hashes)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from server.core.types import Device
from server.store import repository as repo


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceRegistry:
    """Issues device identities and resolves tokens, caching the resolved devices in memory."""

    def __init__(self, *, sessions: sessionmaker[Session], clock: Callable[[], float]) -> None:
        self.sessions = sessions
        self.clock = clock
        self._by_hash: dict[str, Device] = {}

    def enroll(self, device_model: str) -> tuple[Device, str]:
        device = Device(device_id="d-" + secrets.token_hex(8), device_model=device_model)
        token = secrets.token_urlsafe(32)
        with self.sessions.begin() as session:
            repo.add_device(
                session=session,
                device_id=device.device_id,
                device_model=device_model,
                token_hash=hash_token(token),
                now=self.clock(),
            )
        self._by_hash[hash_token(token)] = device
        return device, token

    def cached(self, token: str) -> Device | None:
        """The device of a token already seen, without touching the database (None if not seen)."""
        return self._by_hash.get(hash_token(token))

    def authenticate(self, token: str) -> Device | None:
        digest = hash_token(token)
        device = self._by_hash.get(digest)
        if device is None:
            with self.sessions() as session:
                row = repo.device_by_token(session=session, token_hash=digest)
                if row is None:
                    return None
                device = Device(device_id=row.id, device_model=row.device_model)
            self._by_hash[digest] = device
        return device

    def count(self) -> int:
        with self.sessions() as session:
            return repo.count_devices(session=session)
