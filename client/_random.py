"""Where every DP draw on the device comes from: a cryptographically secure generator, fresh per task.

numpy's default bit generator (PCG64) is fast but predictable from its outputs; a noised gradient releases
many of them. ChaCha20 (randomgen, by numpy's random maintainer) keyed with 256 bits of the operating
system's secure randomness gives numpy's whole ``Generator`` API (normal, gamma, permutation, ...) from a
stream cipher instead.
"""

from __future__ import annotations

import secrets

import numpy as np

__all__ = ["secure_generator"]


def secure_generator() -> np.random.Generator:
    """A ``Generator`` over ChaCha20 (20 rounds) with a fresh key; used whenever no test ``rng`` is given."""
    from randomgen import ChaCha

    return np.random.Generator(ChaCha(seed=secrets.randbits(256), rounds=20))
