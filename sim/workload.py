"""One workload of the default-search suite (sim/workloads.py): a split of real MNIST, a model, a batch, a
fleet size and a device speed spread, as plain data; the simulator builds its devices from it
(``Workload.shards``, ``Workload.fleet``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.data import Dataset, load_mnist, make_partition

if TYPE_CHECKING:
    from sim.controlled import Workbench
    from sim.fleet import FleetSimulator

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """One federated workload on real MNIST.

    ``split``: a ``sim.data.make_partition`` name ("labels-1", "dirichlet-0.1", "adjacent", ...).
    ``data_seed``: the shuffle of the 5,000 digits, hence the 1,000 held-out test digits too.
    ``batch``: a fixed mini-batch size, or None for I-Prof-sized batches (its time SLO).
    ``speed_spread``: slowest device's per-sample time over the fastest's (1: all alike).
    ``speed_order``: "split" gives device i the i-th speed, slowest last, so with a label-sorted split the
    slowest devices hold the highest digits (as ``fleet bench peer`` does); "shuffled" decouples speed from
    labels. Issue 28's probe: with "split" the default under-learns the slow devices' digits.
    ``gradients``: a run's length (its cap), where its final accuracy is read."""

    name: str
    split: str
    devices: int = 20
    model: str = "mnist_cnn"
    batch: int | None = 100
    speed_spread: float = 7.0
    speed_order: str = "split"
    data_seed: int = 0
    split_seed: int = 0
    gradients: int = 3000

    def data(self) -> tuple[Dataset, Dataset]:
        """The training digits and the held-out test digits of this workload's shuffle."""
        return load_mnist(seed=self.data_seed)

    def shards(self, train: Dataset) -> list[np.ndarray]:
        """Each device's indices into ``train``."""
        return make_partition(self.split, train.y, self.devices, np.random.default_rng(self.split_seed))

    def speeds(self, fastest_ms: float = 0.5) -> np.ndarray:
        """Each device's per-sample time in ms, spread evenly from ``fastest_ms`` to ``speed_spread`` times
        it, in ``speed_order``."""
        ms = np.linspace(fastest_ms, fastest_ms * self.speed_spread, self.devices)
        if self.speed_order == "shuffled":
            return np.random.default_rng([self.split_seed, 1]).permutation(ms)
        if self.speed_order != "split":
            raise ValueError(f"speed_order must be 'split' or 'shuffled', got {self.speed_order!r}")
        return ms

    def batches(self) -> list[int] | None:
        """Each device's mini-batch when I-Prof sizes it (``batch`` None): every task takes the fastest
        device's time for 100 examples (its time SLO, met exactly: what I-Prof converges to); None for a
        fixed batch."""
        if self.batch is not None:
            return None
        seconds = self.speeds() + 1.0  # 1 ms of compute a sample on top of each device's delay
        return [max(1, int(100 * seconds.min() / s)) for s in seconds]

    def fleet(
        self,
        bench: Workbench,
        strategy: Callable[[], Any],
        *,
        seed: int,
        evaluations: int = 40,
        **kwargs: Any,
    ) -> FleetSimulator:
        """The simulated fleet of this workload: always online, each device at its fixed speed (1 ms of
        compute a sample plus its delay, the peer benchmark's timing) on its own shard, evaluated
        ``evaluations`` times over the run."""
        from sim.fleet import FleetSimulator
        from sim.population import FleetTiming

        shards = self.shards(bench.train)
        dealt = count()
        timing = FleetTiming(flops_per_sample=1e6, latency_median=0.005, latency_sigma=0.3,
                             mean_online=1e12, mean_offline=1e-3, churn=0.0)  # fmt: skip
        return FleetSimulator(
            bench, strategy, devices=self.devices, seed=seed, timing=timing,
            shard_for=lambda _rng: shards[next(dealt) % len(shards)], batch=self.batch or 100,
            batches=self.batches(), speeds=[1.0 / (ms + 1.0) for ms in self.speeds()],
            eval_every_gradients=max(1, self.gradients // evaluations), **kwargs,
        )  # fmt: skip
