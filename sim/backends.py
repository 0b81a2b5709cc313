"""Where the simulator's gradients are computed: the ``GradientBackend`` seam and the in-process backend.

The event loop hands a task's work over when the task is granted (its version's parameters and the
mini-batch the device drew) and collects the loss and gradient when the task's push event fires. A
task's gradient depends on nothing else, so a backend may compute it any time in between: the local
backend computes it at collection (one at a time, in the driver); the Ray backend (sim/ray_backend.py)
computes many ahead of the virtual clock on a pool of actors. Both give the same numbers.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "BACKENDS",
    "BackendStats",
    "BackendUnavailable",
    "GradientBackend",
    "LocalBackend",
    "make_backend",
]

BACKENDS = ("local", "ray")


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here (its optional dependency is missing)."""


@dataclass
class BackendStats:
    """What a backend did: ``seconds_compute`` summed over whoever ran the training graph,
    ``seconds_wait`` the driver's time blocked on results (local: computing them), ``wasted``
    gradients computed for tasks whose push never came (the run stopped first)."""

    computed: int = 0
    collected: int = 0
    wasted: int = 0
    seconds_compute: float = 0.0
    seconds_wait: float = 0.0
    calls: int = 0  # remote calls (Ray) or graph runs (local)

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(self).items()}


@runtime_checkable
class GradientBackend(Protocol):
    """Computes the devices' gradients for the event loop (see the module docstring)."""

    stats: BackendStats

    def submit(self, key: Hashable, version: int, params: np.ndarray, batch: np.ndarray, due: float) -> None:
        """A task was granted: its gradient on ``params`` (model ``version``) over training rows
        ``batch`` will be collected at virtual time ``due``."""
        ...

    def collect(self, key: Hashable) -> tuple[float, np.ndarray]:
        """The task's (mean loss, flat float32 gradient); blocks until it is computed."""
        ...

    def drain(self) -> int:
        """Forget the tasks never collected (the run stopped); returns how many."""
        ...

    def close(self) -> None:
        """Drop the work not collected and release the workers (the local backend has none)."""
        ...


class LocalBackend:
    """In the driver, at collection time: what the simulator always did, and the default."""

    def __init__(self, bench: Any) -> None:
        """``bench``: a ``sim.controlled.Workbench`` (its ONNX session and training set)."""
        self.bench = bench
        self.stats = BackendStats()
        self._work: dict[Hashable, tuple[np.ndarray, np.ndarray]] = {}

    def __repr__(self) -> str:
        return "LocalBackend()"

    def submit(self, key: Hashable, version: int, params: np.ndarray, batch: np.ndarray, due: float) -> None:
        self._work[key] = (params, batch)

    def collect(self, key: Hashable) -> tuple[float, np.ndarray]:
        params, batch = self._work.pop(key)
        train = self.bench.train
        t0 = time.perf_counter()
        loss, gradient = self.bench.gradients.loss_and_gradient(params, train.x[batch], train.y[batch])
        elapsed = time.perf_counter() - t0
        s = self.stats
        s.seconds_compute += elapsed
        s.seconds_wait += elapsed
        s.computed += 1
        s.collected += 1
        s.calls += 1
        return loss, gradient

    def drain(self) -> int:
        dropped = len(self._work)
        self._work.clear()
        return dropped

    def close(self) -> None:
        """No workers to release; the uncomputed work is dropped."""
        self.drain()


def make_backend(
    name: str,
    bench: Any,
    *,
    workers: int | None = None,
    address: str | None = None,
    chunk: int = 8,
) -> GradientBackend:
    """The backend called ``name`` ("local" or "ray"); Ray is imported only here, and only for "ray"."""
    if name == "local":
        return LocalBackend(bench)
    if name == "ray":
        from sim.ray_backend import RayBackend

        return RayBackend(bench, workers=workers, address=address, chunk=chunk)
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
