"""Online FL on data that changes by the hour, on the real coordinator core (issue 31).

``FleetSimulator`` (sim/fleet.py) has devices online at random and a fixed shard each; online-vs-standard
needs the day instead: a device trains only while its app is in use (``DiurnalFleet.in_use``), on its
own recent window of a stream whose data arrive over time. This module holds that driver and what it
shares with the experiment's other arms (lab/experiments/online_vs_standard.py):

* ``session_event_times``: when each device's data arrive, inside its app sessions (a user posts while
  using the app), so data and training opportunities follow the same day;
* ``make_stream``: the recommender or a drift stream at those times, split by device (``DeviceStreams``);
* ``Model``: a built-in bundle's ONNX training graph (the client's ``GradientSession``) and inference
  graph, the only way any arm computes a gradient or a score;
* ``OnlineFleet``: the devices on a ``build_core`` coordinator (in-memory SQLite, virtual clock). During
  each session a device asks for a task (``Coordinator.request_task``), draws its mini-batch from its
  window at that moment (``DeviceStreams.batch``), computes the gradient on the version it was handed,
  and pushes it (``Coordinator.submit``) after the simulated latency + compute + latency, so the
  strategy's staleness handling sees the staleness the timing makes. Tasks have a fixed size (what
  I-Prof converges to under a time SLO for a model this small: every phone fits the whole batch).
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from server.core.types import TaskGrant, TaskRequest, TaskResult
from server.strategies import Strategy
from sim.controlled import FEATURES
from sim.diurnal import DiurnalFleet
from sim.harness import BatchSizer, VirtualClock, build_core
from sim.population import SPEED_CLASSES, FleetTiming
from sim.streams import (
    SEA,
    DeviceStreams,
    RandomRBFDrift,
    RecommenderStream,
    RotatingHyperplane,
    WindowBound,
    to_bundle_input,
)

HOUR, DAY = 3600.0, 86400.0
STREAMS = ("recommender", "sea", "hyperplane", "rbf")
MODELS = {"recommender": "recommender", "sea": "logreg", "hyperplane": "logreg", "rbf": "logreg"}


def session_event_times(
    fleet: DiurnalFleet, events_per_day: float, horizon: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(times, devices) of the fleet's data in ``[0, horizon)``: each session gets a Poisson number of
    events in proportion to its length (``events_per_day`` per device per day on average), uniform
    inside it."""
    devices, starts, ends = [], [], []
    for d in range(fleet.n_devices):
        s, e = fleet.sessions_of(d, -DAY, horizon)
        devices.append(np.full(s.size, d)), starts.append(s), ends.append(e)
    device, start, end = np.concatenate(devices), np.concatenate(starts), np.concatenate(ends)
    length = end - start
    inside = (start >= 0) & (start < horizon)
    rate = events_per_day * fleet.n_devices * horizon / DAY / max(length[inside].sum(), 1.0)
    counts = rng.poisson(rate * length * inside)
    times = np.repeat(start, counts) + rng.random(int(counts.sum())) * np.repeat(length, counts)
    owners = np.repeat(device, counts)
    keep = times < horizon
    order = np.argsort(times[keep], kind="stable")
    return times[keep][order], owners[keep][order]


@dataclass(frozen=True)
class StreamData:
    """One stream's examples split by device (raw features; ``Model.prepare`` shapes them)."""

    name: str
    streams: DeviceStreams  # the online devices' view (the bound the plan gives them)
    n_classes: int
    metric: str  # "f1@5" (recommender) or "accuracy" (drift streams)

    def with_bound(self, bound: WindowBound) -> DeviceStreams:
        """The same data under another window bound (shares the arrays)."""
        view = copy.copy(self.streams)
        view.bound = bound
        return view


def make_stream(
    name: str, fleet: DiurnalFleet, horizon: float, *, seed: int, events_per_day: float, bound: WindowBound
) -> StreamData:
    """Stream ``name`` (``STREAMS``) generated at the fleet's session times, one device per user."""
    times, devices = session_event_times(fleet, events_per_day, horizon, np.random.default_rng([seed, 21]))
    n = fleet.n_devices
    if name == "recommender":
        log = RecommenderStream(n, horizon / DAY, seed=seed).generate(times, devices)
        streams = DeviceStreams.from_events(log, n_devices=n, bound=bound)
        return StreamData(name, streams, 100, "f1@5")
    generator: SEA | RotatingHyperplane | RandomRBFDrift
    if name == "sea":
        generator = SEA()
    elif name == "hyperplane":
        generator = RotatingHyperplane(horizon / DAY, seed=seed)
    elif name == "rbf":
        generator = RandomRBFDrift(seed=seed)
    else:
        raise ValueError(f"unknown stream {name!r}; known: {STREAMS}")
    drawn = generator.draw(times, np.random.default_rng([seed, 22]))
    streams = DeviceStreams(devices, drawn.time, drawn.X, drawn.y, n_devices=n, bound=bound)
    return StreamData(name, streams, int(generator.n_classes), "accuracy")


class Model:
    """A built-in bundle's training and inference graphs (ONNX Runtime, one thread)."""

    def __init__(self, name: str) -> None:
        from client import GradientSession
        from models.manifest import builtin
        from server.core.evaluation import Evaluator

        self.name = name
        self.bundle = builtin(name)
        manifest = self.bundle.manifest
        self.input_shape = tuple(manifest.input_shape)
        self.gradients = GradientSession(manifest, self.bundle.train_onnx, threads=1)
        self.evaluator = Evaluator(
            manifest, self.bundle.infer_onnx, np.zeros((0, *self.input_shape)), np.zeros(0)
        )

    @property
    def init_params(self) -> np.ndarray:
        return self.bundle.init_params.astype(np.float32).copy()

    @cached_property
    def flops_per_sample(self) -> float:
        """Forward and backward of one example: about 6 FLOPs per parameter (these models are linear
        or nearly so: one multiply-add forward, two backward)."""
        return 6.0 * float(self.bundle.init_params.size)

    def prepare(self, X: np.ndarray) -> np.ndarray:
        """Raw stream features in the bundle's input shape (drift features zero-padded into 1x28x28)."""
        if X.shape[1:] == self.input_shape:
            return np.ascontiguousarray(X, dtype=np.float32)
        return to_bundle_input(X, self.input_shape)

    def loss_and_gradient(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        return self.gradients.loss_and_gradient(params, self.prepare(X), np.asarray(y, dtype=np.int64))

    def scores(self, params: np.ndarray, X: np.ndarray, chunk: int = 2000) -> np.ndarray:
        """Logits of every row of ``X``."""
        parts = [
            self.evaluator.logits(params, self.prepare(X[i : i + chunk])) for i in range(0, len(X), chunk)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, self.bundle.manifest.num_classes))


@dataclass
class OnlineStats:
    """What the online arm did: tasks, examples (the gradient budget), staleness, compute per device."""

    tasks: int = 0
    examples: int = 0
    skipped_empty: int = 0  # sessions whose device had no data in its window (no task asked)
    rejections: int = 0
    dropped: int = 0  # pushes the strategy gave weight 0
    staleness: list[int] = field(default_factory=list)
    examples_by_hour: dict[int, int] = field(default_factory=dict)  # hour index (at grant) → examples
    compute_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per device, simulated
    tasks_by_device: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class OnlineFleet:
    """``fleet.n_devices`` phones training ``model`` on ``data`` through a coordinator core, in sessions."""

    def __init__(
        self,
        model: Model,
        data: StreamData,
        fleet: DiurnalFleet,
        strategy_factory: Callable[[], Strategy],
        *,
        batch: int,
        seed: int,
        horizon: float,
        task_at: float = 0.5,
        timing: FleetTiming | None = None,
    ) -> None:
        """``task_at``: where in a session its one task starts (share of the session's length); ``timing``:
        latency and compute (default: ``FleetTiming`` at the model's FLOPs per example)."""
        self.model, self.data, self.batch = model, data, batch
        self.timing = timing or FleetTiming(flops_per_sample=model.flops_per_sample)
        self.rng = np.random.default_rng([seed, 31])
        self.clock = VirtualClock()
        self.core = build_core(model.bundle, strategy_factory, clock=self.clock, sizer=BatchSizer(mean=batch))
        n = fleet.n_devices
        classes = self.rng.integers(len(SPEED_CLASSES), size=n)
        self.gflops = np.array([SPEED_CLASSES[c][1] for c in classes])
        self.devices = [self.core.enroll(SPEED_CLASSES[c][0])[0] for c in classes]
        starts = []
        for d in range(n):
            s, e = fleet.sessions_of(d, 0.0, horizon)
            starts += [(float(t), d) for t in s + task_at * (e - s)]
        self.starts = sorted(starts)
        self._next = 0
        self._pending: list[tuple[float, int, int, TaskGrant, TaskResult]] = []
        self._seq = 0
        self.stats = OnlineStats(compute_s=np.zeros(n), tasks_by_device=np.zeros(n, dtype=np.int64))

    @property
    def params(self) -> np.ndarray:
        assert self.core.run is not None
        return self.core.run.params

    def advance(self, until: float) -> None:
        """Run every task start and push before ``until``, in time order."""
        while True:
            start = self.starts[self._next][0] if self._next < len(self.starts) else math.inf
            push = self._pending[0][0] if self._pending else math.inf
            if min(start, push) >= until:
                return
            if push <= start:
                self._push()
            else:
                self._start(*self.starts[self._next])
                self._next += 1

    def _start(self, t: float, d: int) -> None:
        self.clock.now = t
        _, _, y_window = self.data.streams.window(d, t)
        if not y_window.size:
            self.stats.skipped_empty += 1
            return
        counts = np.bincount(y_window, minlength=self.model.bundle.manifest.num_classes)
        answer = self.core.request_task(TaskRequest(self.devices[d], FEATURES, counts, int(y_window.size)))
        if not isinstance(answer, TaskGrant):
            self.stats.rejections += 1
            return
        params = self.core.catalog.params(answer.model_id, answer.version)  # the download
        X, y = self.data.streams.batch(d, t, answer.batch_size, self.rng)
        loss, gradient = self.model.loss_and_gradient(params, X, y)
        compute = self.timing.compute_seconds(len(y), self.gflops[d], self.rng)
        done = t + self.timing.latency(self.rng) + compute + self.timing.latency(self.rng)
        label_counts = np.bincount(y, minlength=self.model.bundle.manifest.num_classes)
        result = TaskResult(
            label_counts, float(loss), 1000.0 * compute, None, len(y), gradient, answer.task_id
        )
        s = self.stats
        s.tasks += 1
        s.examples += len(y)
        hour = int(t // HOUR)
        s.examples_by_hour[hour] = s.examples_by_hour.get(hour, 0) + len(y)
        s.compute_s[d] += compute
        s.tasks_by_device[d] += 1
        self._seq += 1
        heapq.heappush(self._pending, (done, self._seq, d, answer, result))

    def _push(self) -> None:
        done, _, d, grant, result = heapq.heappop(self._pending)
        self.clock.now = max(self.clock.now, done)
        outcome = self.core.submit(self.devices[d], grant.task_id, result)
        self.stats.staleness.append(outcome.staleness)
        self.stats.dropped += outcome.weight == 0.0
