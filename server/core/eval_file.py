"""A held-out set that may move: FLEET_EVAL_DATA reread whenever its file changes.

Online learning is judged on what the devices see *now* (docs/online.md): `fleet demo --scenario drift`
rewrites the file every simulated hour with the freshest hour of its stream, and the evaluation loop
scores the newest version on it, so the accuracy chart over time shows the model tracking the drift.
A file that never changes is read once, as before. The writer replaces the file atomically (write, then
``os.replace``); a file that cannot be read keeps the last good set.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np

log = logging.getLogger("fleet.server")


class EvalFile:
    """``x`` and ``y`` of an ``.npz`` file, reloaded by :meth:`refresh` when the file changed."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self.x = np.empty((0,), dtype=np.float32)
        self.y = np.empty((0,), dtype=np.int64)
        self.loads = 0
        if not self.refresh():
            raise ValueError(f"{self.path}: no readable evaluation data (an npz with x and y)")

    def refresh(self) -> bool:
        """Reload if the file changed since the last load; True when a new set was loaded."""
        try:
            stat = self.path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # os.replace gives a new inode
            if stamp == self._stamp:
                return False
            with np.load(self.path) as data:
                x, y = data["x"], data["y"]
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            if self._stamp is not None:
                log.warning("evaluation data %s unreadable, keeping the last set: %s", self.path, exc)
            return False
        if len(y) == 0 or len(x) != len(y):
            return False
        self.x, self.y, self._stamp = x, y, stamp
        self.loads += 1
        return True
