"""The Sybil limits (issue 30, part 4): how many devices one enrollment key may enroll, and how fast; and
the public URL a join code's QR code sends a phone to.

A group of its own, mixed into ``server.settings.Settings`` like the security settings (same FLEET_*
variables, one docs table). Beside the per-address limit (``enroll_rate_per_second``, ``enroll_burst``),
which one key used from many addresses walks around, these bound what one key buys whatever the address.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

# the largest quota a key may be given: finite on purpose (a key is never unlimited)
MAX_QUOTA = 1_000_000


class EnrollmentSettings(BaseModel):
    enroll_quota_per_key: int = Field(
        1000,
        ge=1,
        le=MAX_QUOTA,
        description="the devices one enrollment key may enroll: the bootstrap key's, and the default of a "
        "key created in the console without one; re-enrolling an install is not counted again, revoked "
        "devices keep their slot",
    )
    enroll_key_rate_per_second: float = Field(
        1.0,
        gt=0,
        le=1e6,
        description="enrollments per second per enrollment key, from all addresses together",
    )
    enroll_key_burst: int = Field(
        300,
        ge=1,
        le=1_000_000,
        description="the enrollment burst per key above that rate (a 200-device fleet enrolls at once)",
    )
    public_url: str | None = Field(
        None,
        max_length=2000,
        pattern=r"^https?://[^\s?#]+$",
        description="the coordinator's base URL as phones reach it (e.g. http://192.168.1.20:8000): a join "
        "code's QR code holds <public_url>/device/#join=<code>; unset: the URL the console was opened at",
    )


ENROLLMENT_FIELDS: tuple[str, ...] = tuple(EnrollmentSettings.model_fields)
