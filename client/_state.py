"""Where a device keeps what must outlive a process: its install secret and its privacy ledger (issue 27).

A state directory sits next to the device's data (``fleet worker``: ``<data>.fleet-state/``) or in the
app's own storage, so the ε a device's data has spent follows the data, not an enrollment. Files are
written atomically (a temporary file, fsync, ``os.replace``) and readable by their owner only: a crash
leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["INSTALL_FILE", "STATE_SUFFIX", "default_state_dir", "install_secret", "write_json_atomic"]

INSTALL_FILE = "install.json"
STATE_SUFFIX = ".fleet-state"  # fleet worker: the state of ``shard.npz`` is in ``shard.npz.fleet-state/``


def default_state_dir(data: str | Path) -> Path:
    """The state directory of a data file: next to it, so the ledger goes wherever the data goes."""
    path = Path(data)
    return path.with_name(path.name + STATE_SUFFIX)


def write_json_atomic(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` durably and atomically, owner-only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(value, out, indent=1, allow_nan=False)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)


def _sync_directory(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def install_secret(state_dir: str | Path | None) -> str:
    """This install's secret, created once and kept in ``state_dir`` (None: a new one per process).

    Sent when enrolling, so that enrolling again (after a 401, a restart, a lost token) returns the same
    device id and the coordinator's ledger of this device goes on. A reinstall of the app wipes it."""
    if state_dir is None:
        return secrets.token_urlsafe(32)
    path = Path(state_dir) / INSTALL_FILE
    try:
        secret = json.loads(path.read_text(encoding="utf-8"))["install_secret"]
    except FileNotFoundError:
        secret = secrets.token_urlsafe(32)
        write_json_atomic(path, {"install_secret": secret})
        return secret
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: unreadable install state ({exc}); remove it to enroll as a new device"
        ) from exc
    if not isinstance(secret, str) or len(secret) < 22:
        raise ValueError(f"{path}: malformed install secret; remove it to enroll as a new device")
    return secret
