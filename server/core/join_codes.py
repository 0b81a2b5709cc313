"""Join codes: short-lived enrollment keys a phone reads from a QR code (the console's "Join a phone").

A code is 20 characters of Crockford's base32 (100 bits from ``secrets``) in groups of four, e.g.
``7K3M-QX9B-2HWD-N4TF-8RZA``: unguessable, URL-safe, and readable aloud or typed by hand, since the
coordinator also takes it in lower case, without dashes, or with O for 0 and I or L for 1
(``canonical``). Only its SHA-256 is stored, like any enrollment key's.
"""

from __future__ import annotations

import secrets

__all__ = [
    "DEFAULT_DEVICES",
    "DEFAULT_MINUTES",
    "MAX_DEVICES",
    "MAX_MINUTES",
    "MIN_MINUTES",
    "canonical",
    "lifetime_problem",
    "new_code",
]

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32: no I, L, O, U
LENGTH, GROUP = 20, 4  # 20 x 5 = 100 bits
MIN_MINUTES, MAX_MINUTES, DEFAULT_MINUTES = 1, 1440, 15  # a day at most: a code is for the next few phones
MAX_DEVICES, DEFAULT_DEVICES = 1000, 5
_READ_AS = str.maketrans({"O": "0", "I": "1", "L": "1", "-": None, " ": None})


def new_code() -> str:
    """A fresh code, grouped: ``XXXX-XXXX-XXXX-XXXX-XXXX``."""
    return _grouped("".join(secrets.choice(ALPHABET) for _ in range(LENGTH)))


def canonical(text: str) -> str | None:
    """The grouped form of a code as a person may type it, or None when ``text`` cannot be one."""
    plain = text.strip().upper().translate(_READ_AS)
    if len(plain) != LENGTH or any(c not in ALPHABET for c in plain):
        return None
    return _grouped(plain)


def _grouped(plain: str) -> str:
    return "-".join(plain[i : i + GROUP] for i in range(0, LENGTH, GROUP))


def lifetime_problem(minutes: int, max_devices: int) -> str | None:
    """Why a join code cannot have this lifetime or quota (None when it can)."""
    if not MIN_MINUTES <= minutes <= MAX_MINUTES:
        return f"a join code lasts {MIN_MINUTES} to {MAX_MINUTES} minutes, not {minutes}"
    if not 1 <= max_devices <= MAX_DEVICES:
        return f"a join code enrolls 1 to {MAX_DEVICES} devices, not {max_devices}"
    return None
