"""The device's own data shard: it never leaves the device, only label counts do."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ._exceptions import WorkerError

__all__ = ["DeviceData", "FileFedData", "fit_input"]


def fit_input(x: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray:
    """Reshape local examples to the model's input shape (e.g. (1, 28, 28) to (784,))."""
    if x.shape[1:] == tuple(input_shape):
        return x
    if int(np.prod(x.shape[1:])) != int(np.prod(input_shape)):
        raise WorkerError(
            f"local examples of shape {x.shape[1:]} do not fit model input {tuple(input_shape)}"
        )
    return x.reshape((len(x), *input_shape))


class DeviceData:
    """Examples ``x`` (float32 in [0, 1]) and labels ``y`` (int64) held by one device."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        x = np.asarray(x)
        y = np.asarray(y)
        if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(f"expected x (N, ...) and y (N,), got {x.shape} and {y.shape}")
        if len(y) == 0:
            raise ValueError("device data is empty")
        if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
            raise ValueError("labels must be non-negative integers")
        if x.dtype == np.uint8:
            x = x.astype(np.float32) / np.float32(255.0)
        else:
            x = np.ascontiguousarray(x, dtype=np.float32)
            if x.size and (not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0):
                raise ValueError("float inputs must be finite and in [0, 1] (or pass uint8 0-255)")
        self.x = x
        self.y = y.astype(np.int64)

    @classmethod
    def from_npz(cls, path: str | Path) -> DeviceData:
        """Load a shard saved with ``np.savez(path, x=..., y=...)``."""
        with np.load(Path(path)) as archive:
            missing = {"x", "y"} - set(archive.files)
            if missing:
                raise ValueError(f"{path}: missing arrays {sorted(missing)}")
            return cls(archive["x"], archive["y"])

    def __len__(self) -> int:
        return len(self.y)

    def __repr__(self) -> str:
        return f"DeviceData(n={len(self)}, x_shape={self.x.shape[1:]})"

    def label_counts(self, num_classes: int) -> list[int]:
        """Examples per class, as the server wants them (labels past ``num_classes`` are an error)."""
        return label_counts(self.y, num_classes)

    def sample(self, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``size`` examples drawn with replacement, for benchmarks that need an exact batch size whatever
        the shard holds; a task uses ``batch`` instead (repeating examples only burns a phone's battery)."""
        if size < 1:
            raise ValueError(f"sample size must be >= 1, got {size}")
        index = rng.integers(0, len(self.y), size=size)
        return self.x[index], self.y[index]

    def batch(self, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """At most ``size`` examples, without replacement: all N (in order, no random draw) if ``size`` >= N.

        A task never computes more than the device holds: a grant of 1,000 on 2 drawings is 2 examples,
        and the push says 2, so the profiler learns the time of what was really computed."""
        if size < 1:
            raise ValueError(f"batch size must be >= 1, got {size}")
        if size >= len(self.y):
            return self.x.copy(), self.y.copy()  # a copy: a caller (an attack) may change its labels
        index = np.sort(rng.choice(len(self.y), size=size, replace=False))
        return self.x[index], self.y[index]


class FileFedData(DeviceData):
    """Device data that follows an ``.npz`` file: reloaded whenever the file changes.

    Online learning's device trains on its *recent* data, which grows and ages while the worker runs
    (docs/online.md). Whoever collects the data (the app, or `fleet demo --scenario drift` on its
    accelerated clock) rewrites the file, atomically (write then ``os.replace``), and the worker sees the
    new window at its next task: ``len``, ``label_counts`` and ``batch`` look at the file first. Nothing
    in the worker changes. A file that cannot be read (half written, empty window) keeps the previous
    data: a task computes on the last good window rather than failing.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        if not self.refresh():
            raise ValueError(f"{self.path}: no readable device data")

    def refresh(self) -> bool:
        """Reload the file if it changed since the last load; True when new data was loaded."""
        try:
            stat = self.path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # os.replace: a new inode
            if stamp == self._stamp:
                return False
            fresh = DeviceData.from_npz(self.path)
        except (
            OSError,
            ValueError,
            EOFError,
            zipfile.BadZipFile,
        ):  # missing, half-written or empty: keep what we have
            return False
        self.x, self.y, self._stamp = fresh.x, fresh.y, stamp
        return True

    def __len__(self) -> int:
        self.refresh()
        return super().__len__()

    def __repr__(self) -> str:
        return f"FileFedData({str(self.path)!r}, n={len(self.y)})"

    def label_counts(self, num_classes: int) -> list[int]:
        self.refresh()
        return super().label_counts(num_classes)

    def batch(self, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        self.refresh()
        return super().batch(size, rng)


def label_counts(y: np.ndarray, num_classes: int) -> list[int]:
    """Counts per class of the labels ``y``."""
    if y.size and int(y.max()) >= num_classes:
        raise ValueError(f"label {int(y.max())} out of range for {num_classes} classes")
    return [int(c) for c in np.bincount(y, minlength=num_classes)]
