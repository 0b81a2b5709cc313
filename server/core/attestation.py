"""Device attestation at enrollment: the hook a Sybil defence plugs into (issue 30, part 4).

A quota per enrollment key bounds how many identities one key mints; it cannot tell a real phone from a
script. Attestation can: the app asks the platform (Play Integrity on Android) for a signed statement
that a genuine, unmodified build of the app runs on a genuine device, bound to *this* enrollment, and
the coordinator checks it before it mints an identity. docs/attestation.md is the design for Play
Integrity; nothing here calls Google.

``DeviceRegistry.enroll`` calls ``Attestation.verify`` once per enrollment (a new install and an install
enrolling again alike: a token proves the request, not the install), outside its enrollment lock (a real
verifier makes a network call), before the quota is looked at. A refusal is ``EnrollmentRefused`` with
reason ``attestation_refused``: HTTP 403, and the device stops. The default, ``AcceptAll``, accepts
every device and says so in its verdict: a deployment without a verifier has no attestation at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["AcceptAll", "Attestation", "Verdict", "enrollment_binding"]


@dataclass(frozen=True)
class Verdict:
    """A verifier's answer: ``accepted``, and why (logged; a refusal's reason is told to the device)."""

    accepted: bool
    reason: str = ""


@runtime_checkable
class Attestation(Protocol):
    """Checks the attestation ``token`` a device sent with its enrollment (None: it sent none).

    ``binding`` is ``enrollment_binding(...)`` of this request: a verifier must find it in the token (Play
    Integrity: the request hash, or the nonce), so a token obtained for one enrollment cannot enroll
    another. It must fail closed: a token it cannot check (unreachable service, malformed answer,
    expired) is a refusal, never an acceptance."""

    name: str

    def verify(self, device_model: str, token: str | None, *, binding: str) -> Verdict: ...


class AcceptAll:
    """No attestation: every device is accepted (the default until a verifier is configured)."""

    name = "none"

    def verify(self, device_model: str, token: str | None, *, binding: str) -> Verdict:
        return Verdict(True, "not attested: no verifier is configured, every device is accepted")


def enrollment_binding(key_secret_hash: str, install_hash: str | None, device_model: str) -> str:
    """What an attestation token must be bound to: SHA-256 (hex) over the enrollment key's SHA-256, the
    install secret's SHA-256 (empty without one) and the device model, newline-separated. The app
    computes the same from what it is about to send (docs/attestation.md): a token requested for one
    install, key or model does not verify for another."""
    material = "\n".join((key_secret_hash, install_hash or "", device_model))
    return hashlib.sha256(material.encode()).hexdigest()
