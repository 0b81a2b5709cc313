"""A finger's strokes as an MNIST-like 28×28 image, and the labelled drawings a person contributes.

MNIST digits are centred by their centre of mass in a 28×28 box after scaling the digit into
20×20 (LeCun et al.); drawings get the same treatment so the served model sees what it was trained
on. Pure numpy: the Kivy screen only hands over stroke points.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from client._data import DeviceData

__all__ = ["Drawings", "strokes_to_image"]

logger = logging.getLogger("fleet.app")

Stroke = Sequence[tuple[float, float]]
SIDE, BOX, OVERSAMPLE = 28, 20, 4
PEN = 1.1  # stroke radius in pixels of the 28×28 image (MNIST strokes are 2–3 px wide)


def strokes_to_image(strokes: Sequence[Stroke]) -> np.ndarray:
    """(28, 28) float32 in [0, 1], ink = 1; y grows upwards (Kivy's convention). All-zero if no ink."""
    points = [np.asarray(s, dtype=np.float64).reshape(-1, 2) for s in strokes if len(s)]
    if not points:
        return np.zeros((SIDE, SIDE), np.float32)
    every = np.concatenate(points)
    low, high = every.min(axis=0), every.max(axis=0)
    scale = (BOX * OVERSAMPLE) / max(float((high - low).max()), 1e-6)
    size = SIDE * OVERSAMPLE
    canvas = np.zeros((size, size), np.float32)
    offset = (size - (high - low) * scale) / 2.0
    radius = PEN * OVERSAMPLE
    for stroke in points:
        xy = (stroke - low) * scale + offset
        xy[:, 1] = size - xy[:, 1]  # image rows grow downwards
        _ink(canvas, _dense(xy, step=radius / 3.0), radius)
    image = canvas.reshape(SIDE, OVERSAMPLE, SIDE, OVERSAMPLE).mean(axis=(1, 3))
    return _centre_of_mass(image)


def _dense(xy: np.ndarray, step: float) -> np.ndarray:
    """Points along the polyline no more than ``step`` apart (a tap is one point)."""
    if len(xy) == 1:
        return xy
    out = [xy[:1]]
    for a, b in zip(xy[:-1], xy[1:], strict=True):
        n = max(1, int(np.ceil(np.linalg.norm(b - a) / step)))
        t = np.linspace(0.0, 1.0, n + 1)[1:, None]
        out.append(a + (b - a) * t)
    return np.concatenate(out)


def _ink(canvas: np.ndarray, centres: np.ndarray, radius: float) -> None:
    rows, cols = np.ogrid[: canvas.shape[0], : canvas.shape[1]]
    r = int(np.ceil(radius))
    for x, y in centres:
        top, left = max(0, int(y) - r), max(0, int(x) - r)
        window = canvas[top : int(y) + r + 2, left : int(x) + r + 2]
        if window.size == 0:
            continue
        dist = (rows[top : top + window.shape[0]] - y) ** 2 + (
            cols[:, left : left + window.shape[1]] - x
        ) ** 2
        np.maximum(window, (dist <= radius * radius).astype(np.float32), out=window)


def _centre_of_mass(image: np.ndarray) -> np.ndarray:
    total = float(image.sum())
    if total <= 0:
        return image
    rows, cols = np.indices(image.shape)
    dy = int(round(SIDE / 2 - 0.5 - float((rows * image).sum()) / total))
    dx = int(round(SIDE / 2 - 0.5 - float((cols * image).sum()) / total))
    shifted = np.zeros_like(image)
    src = image[max(0, -dy) : SIDE - max(0, dy), max(0, -dx) : SIDE - max(0, dx)]
    shifted[max(0, dy) : max(0, dy) + src.shape[0], max(0, dx) : max(0, dx) + src.shape[1]] = src
    return np.clip(shifted, 0.0, 1.0)


class Drawings:
    """Labelled drawings kept in ``drawings.npz`` in the app's folder (uint8 images, int64 labels)."""

    FILE = "drawings.npz"

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / self.FILE
        self.x = np.zeros((0, SIDE, SIDE), np.uint8)
        self.y = np.zeros((0,), np.int64)
        if self.path.exists():
            try:
                with np.load(self.path) as saved:
                    self.x, self.y = saved["x"].astype(np.uint8), saved["y"].astype(np.int64)
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("drawings file unreadable (%s); starting afresh", type(exc).__name__)

    def __len__(self) -> int:
        return len(self.y)

    def __repr__(self) -> str:
        return f"Drawings(n={len(self)})"

    def add(self, image: np.ndarray, label: int) -> None:
        """Keep one drawing (an image from ``strokes_to_image``) with the digit the person says it is."""
        if not 0 <= int(label) <= 9:
            raise ValueError(f"label must be a digit 0-9, got {label}")
        pixels = np.clip(np.rint(np.asarray(image, np.float32) * 255.0), 0, 255).astype(np.uint8)
        self.x = np.concatenate([self.x, pixels.reshape(1, SIDE, SIDE)])
        self.y = np.concatenate([self.y, np.asarray([int(label)], np.int64)])
        self._save()

    def counts(self) -> list[int]:
        return [int(c) for c in np.bincount(self.y, minlength=10)]

    def data(self, shard: DeviceData | None = None) -> DeviceData | None:
        """The examples to train on: the drawings, after the demo shard if there is one."""
        if shard is None:
            return DeviceData(self.x[:, None], self.y) if len(self) else None
        if not len(self):
            return shard
        drawn = self.x[:, None].astype(np.float32) / np.float32(255.0)
        x = np.concatenate([shard.x, drawn.reshape((len(self), *shard.x.shape[1:]))])
        return DeviceData(x, np.concatenate([shard.y, self.y]))

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".drawings-", suffix=".npz", dir=self.path.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, x=self.x, y=self.y)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
