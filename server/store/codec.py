"""Strategy state ↔ bytes: JSON for plain values, npz for arrays (no pickle)."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np


def encode_state(state: dict[str, Any]) -> bytes:
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    plain = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    buffer = io.BytesIO()
    np.savez(buffer, __json__=np.frombuffer(json.dumps(plain).encode(), dtype=np.uint8), **arrays)
    return buffer.getvalue()


def decode_state(data: bytes) -> dict[str, Any]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        state: dict[str, Any] = json.loads(archive["__json__"].tobytes())
        state.update({k: archive[k] for k in archive.files if k != "__json__"})
    return state
