"""Device enrollment and bearer-token authentication (tokens are stored only as SHA-256 hashes).

An enrollment through a key (the API's) is checked, in order: the attestation verifier (outside the
lock: a real one calls out), then, under the enrollment lock, the key's quota of devices. Re-enrolling
an install is never counted again (it is the same device). Revoked devices keep their slot: revoking a
key's Sybils must not hand the attacker fresh ones (docs/protocol.md, Sybil limits). Enrollments made
in process without a key (the simulator, tests, benchmarks) are not limited.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable

from server.core.attestation import AcceptAll, Attestation, enrollment_binding
from server.core.enrollment import EnrollmentKeys, KeyUse
from server.core.errors import EnrollmentRefused, NotFound
from server.core.events import DeviceEnrolled, DeviceReenrolled, DeviceRevoked
from server.core.ports import EnrollmentKey, Store
from server.core.types import Device


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceRegistry:
    """Issues device identities and resolves tokens, caching the resolved devices in memory.

    Revocation (and a re-enrollment, which replaces the token) drops a device from the cache; the lock
    orders it against an ``authenticate`` that read the device from storage just before, so that one
    cannot put it back."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Callable[[], float],
        attestation: Attestation | None = None,
        default_quota: int | None = None,
    ) -> None:
        """``default_quota``: the devices a key without a quota of its own may enroll (the bootstrap key
        and keys created without one; None: unlimited). Set from FLEET_ENROLL_QUOTA_PER_KEY."""
        self.store = store
        self.clock = clock
        self.attestation: Attestation = attestation or AcceptAll()
        self.default_quota = default_quota
        self.keys = EnrollmentKeys(store=store, clock=clock)
        self._by_hash: dict[str, Device] = {}
        self._revoked: set[str] = set()  # device ids revoked by this process
        self._lock = threading.Lock()
        self._enrolling = threading.Lock()  # orders a new install's lookup and its insert
        self._epoch = 0  # re-enrollments by this process; ``_reissued``: a device's last one
        self._reissued: dict[str, int] = {}

    def quota(self, key: EnrollmentKey) -> int | None:
        """How many devices ``key`` may enroll (None: no limit)."""
        return key.max_devices if key.max_devices is not None else self.default_quota

    def enroll(
        self,
        device_model: str,
        install_secret: str | None = None,
        *,
        key: KeyUse | None = None,
        attestation: str | None = None,
    ) -> tuple[Device, str]:
        """A device identity and a fresh token. With ``install_secret``, an install seen before gets its
        own id back (its privacy ledger goes on) and a new token that replaces the old one; a revoked
        install is refused: revocation is not undone by enrolling again. With ``key`` (how the API
        enrolls), the attestation ``token`` is verified and a new device must fit in the key's quota
        (``EnrollmentRefused`` otherwise)."""
        token = secrets.token_urlsafe(32)
        digest = hash_token(token)
        install = None if install_secret is None else hash_token(install_secret)
        if key is not None:
            self._attest(
                device_model, attestation, enrollment_binding(key.secret_hash, install, device_model)
            )
        with self._enrolling:  # one process: two enrollments of a new install make one device
            known = None if install is None else self.store.device_by_install(install)
            if known is None:
                if key is not None:
                    self._within_quota(key.key)
                device = Device(device_id="d-" + secrets.token_hex(8), device_model=device_model)
                key_id = None if key is None else key.key.key_id
                self.store.commit(
                    [DeviceEnrolled(device.device_id, device_model, digest, self.clock(), install, key_id)]
                )
            else:
                if known.revoked_at is not None:
                    raise EnrollmentRefused(
                        f"device {known.device_id} was revoked; this install cannot enroll again",
                        reason="install_revoked",
                    )
                device = Device(device_id=known.device_id, device_model=known.device_model)
                self.store.commit([DeviceReenrolled(device.device_id, digest, self.clock())])
        with self._lock:  # every write to the cache holds it: ``revoke`` iterates the cache
            if known is not None:  # the replaced token stops working in this process at once
                self._epoch += 1
                self._reissued[device.device_id] = self._epoch
                for old in [h for h, d in self._by_hash.items() if d.device_id == device.device_id]:
                    del self._by_hash[old]
            self._by_hash[digest] = device
        return device, token

    def _attest(self, device_model: str, token: str | None, binding: str) -> None:
        verdict = self.attestation.verify(device_model, token, binding=binding)
        if not verdict.accepted:
            raise EnrollmentRefused(
                f"device attestation refused: {verdict.reason or 'no reason given'}",
                reason="attestation_refused",
            )

    def _within_quota(self, key: EnrollmentKey) -> None:
        """Refuse a new device when ``key`` has enrolled its quota (under ``_enrolling``: within one
        process, two enrollments cannot both take the last slot; API workers may each take one)."""
        quota = self.quota(key)
        if quota is None:
            return
        enrolled = self.store.count_devices(enrollment_key_id=key.key_id)
        if enrolled >= quota:
            raise EnrollmentRefused(
                f"enrollment key {key.name!r} has enrolled its quota of {quota} devices; ask the operator "
                "for another key or a larger quota",
                reason="enrollment_quota",
            )

    def cached(self, token: str) -> Device | None:
        """The device of a token already seen, without touching storage (None if not seen)."""
        return self._by_hash.get(hash_token(token))

    def authenticate(self, token: str) -> Device | None:
        digest = hash_token(token)
        device = self._by_hash.get(digest)
        if device is None:
            seen = self._epoch
            device = self.store.device_by_token(digest)  # None for a revoked device
            if device is None:
                return None
            with self._lock:  # revoked, or its token replaced, since storage answered: not cached
                if device.device_id in self._revoked or self._reissued.get(device.device_id, 0) > seen:
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
    def create_enrollment_key(
        self, name: str, *, actor: str, max_devices: int | None = None
    ) -> tuple[EnrollmentKey, str]:
        """A new stored key and its secret (shown once); ``max_devices``: its quota (None: the default)."""
        return self.keys.create(name, actor=actor, max_devices=max_devices)

    def create_join_code(self, minutes: int, *, actor: str, max_devices: int) -> tuple[EnrollmentKey, str]:
        """A key that expires after ``minutes`` (a join code: server/core/join_codes.py) and its code."""
        return self.keys.create_join_code(minutes, actor=actor, max_devices=max_devices)

    def resolve_key(self, secret: str, *, bootstrap: bool = False) -> KeyUse | None:
        """The valid key ``secret`` is (``bootstrap``: the caller matched FLEET_ENROLLMENT_KEY), else None;
        ``EnrollmentCodeExpired`` for a key past its end (a join code)."""
        return self.keys.resolve(secret, bootstrap=bootstrap)

    def devices_per_key(self) -> dict[str, int]:
        """Devices each key enrolled, revoked ones included (what its quota counts)."""
        return self.store.devices_per_key()

    def enrollment_keys(self) -> list[EnrollmentKey]:
        return self.keys.list()

    def revoke_enrollment_key(self, key_id: str, *, actor: str) -> None:
        self.keys.revoke(key_id, actor=actor)

    def enrollment_key_valid(self, secret: str) -> bool:
        """Whether ``secret`` is a stored, non-revoked key (reads storage: call it off the event loop)."""
        return self.keys.valid(secret)
