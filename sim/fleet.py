"""A fleet of virtual devices driving the coordinator core through a discrete-event loop.

Events: a device comes online and asks for a task; its task completes (download, compute, upload)
and it pushes the gradient; it retries after a rejection; its session ends (maybe churning). The
gradient is computed on the parameters of the version the device was handed, with the real ONNX
training graph; staleness is whatever the timing makes it (τ = version now − version handed). With
``draw_at_grant`` the device draws its mini-batch when it is granted the task, so the gradient is fixed
from then on and a ``GradientBackend`` (sim/backends.py) may compute it ahead of the clock (Ray).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from server.core.errors import InvalidInput
from server.core.types import Device, TaskGrant, TaskRequest, TaskResult
from server.strategies import Strategy
from sim.backends import GradientBackend, LocalBackend
from sim.controlled import FEATURES, Workbench
from sim.events import EventQueue
from sim.harness import BatchSizer, build_core
from sim.population import FleetTiming, speed_class

if TYPE_CHECKING:
    from sim.adversary import Adversary


@dataclass
class VirtualDevice:
    device: Device
    gflops: float
    shard: np.ndarray
    counts: np.ndarray
    online_until: float = 0.0
    busy: bool = False
    key: str | None = None  # the enrollment key id it enrolled with (set with an adversary: sim/adversary.py)


@dataclass
class FleetResult:
    times: list[float] = field(default_factory=list)
    updates: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    gradients_at_eval: list[int] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    gradients: int = 0
    diverged: bool = False  # the parameters stopped being finite: the run ended there
    dropped: int = 0
    rejections: int = 0
    joined: int = 0
    seconds_gradient: float = 0.0  # the event loop waiting for gradients (local: computing them)
    seconds_total: float = 0.0
    seconds_compute: float = 0.0  # the training graph's time, summed over whoever ran it
    end_time: float = 0.0  # virtual time and model version when the run stopped (where a miss is censored)
    end_updates: int = 0

    def first_time_at(self, threshold: float) -> tuple[float, int, int] | None:
        """(virtual seconds, updates, gradients computed) at the first evaluation ≥ threshold."""
        for t, u, g, a in zip(self.times, self.updates, self.gradients_at_eval, self.accuracy, strict=True):
            if a >= threshold:
                return t, u, g
        return None

    @property
    def overhead(self) -> float:
        """Share of the run's wall time spent outside gradient computation and evaluation."""
        return 1.0 - self.seconds_gradient / self.seconds_total if self.seconds_total else 0.0


class FleetSimulator:
    """``devices`` virtual devices with shards drawn by ``shard_for`` (called again for each newcomer)."""

    def __init__(
        self,
        bench: Workbench,
        strategy_factory: Callable[[], Strategy],
        *,
        devices: int,
        shard_for: Callable[[np.random.Generator], np.ndarray],
        seed: int,
        timing: FleetTiming | None = None,
        batch: int = 100,
        eval_every: int = 20,
        evaluate: bool = True,
        speeds: Sequence[float] | None = None,
        eval_every_gradients: int | None = None,
        backend: GradientBackend | None = None,
        draw_at_grant: bool = False,
        batches: Sequence[int] | None = None,
        adversary: Adversary | None = None,
    ) -> None:
        """``speeds``: each device's GFLOP/s, fixed (else drawn from the speed classes);
        ``eval_every_gradients``: evaluate after that many gradients instead of every ``eval_every``
        versions, so strategies that buffer K gradients per version are sampled alike; ``backend``:
        where gradients are computed (default: in this process; the caller closes any other, and
        a later ``run`` continues with the tasks still in flight); ``draw_at_grant``: each device draws
        its mini-batch when granted the task, so a backend can compute ahead of the clock (Ray needs
        it). Off by default: the committed experiments drew it at the push, and their random stream
        (timings included) stays the one their results came from. ``batches``: each device's own mini-batch
        size, indexed like ``speeds`` (I-Prof sizing to a time SLO, converged), instead of ``batch``.
        ``adversary``: which devices are Byzantine and what they push (sim/adversary.py); None: all honest,
        and the run is exactly the one without the parameter (the adversary never draws from ``rng``)."""
        if backend is not None and not isinstance(backend, LocalBackend) and not draw_at_grant:
            raise ValueError("a backend that computes ahead of the clock needs draw_at_grant=True")
        self.draw_at_grant = draw_at_grant
        self.backend: GradientBackend = backend or LocalBackend(bench)
        self.bench, self.timing, self.batch = bench, timing or FleetTiming(), batch
        self.eval_every, self.do_evaluate = eval_every, evaluate
        self.speeds, self.eval_every_gradients = speeds, eval_every_gradients
        self.rng = np.random.default_rng([seed, 11])
        self.shard_for = shard_for
        self.queue = EventQueue()
        self.batches = batches
        self.adversary = adversary
        self._handed: dict[str, np.ndarray] = {}  # a Byzantine device's parameters, kept for a poisoned batch
        per_model = {f"slot-{i}": int(b) for i, b in enumerate(batches or ())}
        sizer = BatchSizer(mean=batch, per_model=per_model)
        self.core = build_core(bench.bundle, strategy_factory, clock=self.queue, sizer=sizer)
        self.devices: list[VirtualDevice] = []
        self.result = FleetResult()
        self.eval_time = 0.0
        for _ in range(devices):
            self._join(start=float(self.rng.exponential(self.timing.mean_offline / 10)))

    def _join(self, start: float) -> None:
        model, gflops = speed_class(self.rng)
        if self.speeds is not None:
            gflops = float(self.speeds[len(self.devices) % len(self.speeds)])
        if self.batches is not None:
            model = f"slot-{len(self.devices) % len(self.batches)}"  # its own model: its own batch size
        device, _ = self.core.enroll(model)
        shard = self.shard_for(self.rng)
        counts = np.bincount(self.bench.train.y[shard], minlength=self.bench.num_classes)
        key = None if self.adversary is None else self.adversary.key_of(len(self.devices))
        self.devices.append(VirtualDevice(device, gflops, shard, counts, key=key))
        self.result.joined += 1
        self.queue.schedule(start, ("online", len(self.devices) - 1))

    def _evaluate(self) -> None:
        t0 = time.perf_counter()
        accuracy = self.bench.evaluate(self.core.run.served(), None)[0] if self.do_evaluate else math.nan
        self.eval_time += time.perf_counter() - t0
        self.result.times.append(self.queue.now)
        self.result.updates.append(self.core.run.version)
        self.result.accuracy.append(accuracy)
        self.result.gradients_at_eval.append(self.result.gradients)

    def _request(self, i: int) -> None:
        vd = self.devices[i]
        now = self.queue.now
        if now >= vd.online_until:
            self._session_end(i)
            return
        grant = self.core.request_task(TaskRequest(vd.device, FEATURES, vd.counts))
        if not isinstance(grant, TaskGrant):
            self.result.rejections += 1
            self.queue.schedule(now + grant.retry_after, ("request", i))
            return
        compute = self.timing.compute_seconds(grant.batch_size, vd.gflops, self.rng)
        done = now + self.timing.latency(self.rng) + compute + self.timing.latency(self.rng)
        vd.busy = True
        params = self.core.catalog.params(grant.model_id, grant.version)  # the download, kept on the device
        batch = None
        if self.draw_at_grant:
            batch = self.rng.choice(vd.shard, size=grant.batch_size, replace=True)
            self.backend.submit(grant.task_id, grant.version, params, batch, done)
            if self.adversary is not None and self.adversary.is_byzantine(i):
                self._handed[grant.task_id] = params
        self.queue.schedule(done, ("push", i, grant, batch if self.draw_at_grant else params))

    def _push(self, i: int, grant: TaskGrant, drawn: np.ndarray) -> None:
        """``drawn``: the batch drawn at grant time, or (``draw_at_grant`` off) the parameters handed out,
        the batch then drawn now, where the experiments' random stream has always drawn it."""
        vd = self.devices[i]
        batch = drawn
        if not self.draw_at_grant:
            batch = self.rng.choice(vd.shard, size=grant.batch_size, replace=True)
            self.backend.submit(grant.task_id, grant.version, drawn, batch, self.queue.now)
        t0 = time.perf_counter()
        loss, gradient = self.backend.collect(grant.task_id)
        self.result.seconds_gradient += time.perf_counter() - t0
        self.result.gradients += 1
        labels = self.bench.train.y[batch]
        byzantine = self.adversary is not None and self.adversary.is_byzantine(i)
        if byzantine and self.adversary is not None and self.adversary.silent:
            self.adversary.observe(True, gradient, 0.0)  # lost on the way: the strategy never sees it
            self._handed.pop(grant.task_id, None)
            self.result.dropped += 1
            vd.busy = False
            self._request(i)
            return
        if byzantine:
            assert self.adversary is not None
            params = self._handed.pop(grant.task_id, None) if self.draw_at_grant else drawn
            loss, gradient, labels = self.adversary.push(self.bench, params, batch, loss, gradient)
        if not (math.isfinite(loss) and np.isfinite(gradient).all()):
            self.result.diverged = True  # a real device's push would be refused (422): the run is over
            return
        counts = np.bincount(labels, minlength=self.bench.num_classes)
        body = TaskResult(counts, float(loss), 0.0, None, grant.batch_size, gradient, grant.task_id)
        try:
            outcome = self.core.submit(vd.device, grant.task_id, body)
        except InvalidInput:  # refused as a real push would be (422): a norm beyond the bound, say
            vd.busy = False
            if not byzantine:  # an honest gradient that large: the model blew up, the run is over
                self.result.diverged = True
                return
            assert self.adversary is not None
            self.adversary.observe(True, gradient, 0.0)  # the coordinator's own check stopped it
            self.result.dropped += 1
            self._request(i)
            return
        vd.busy = False
        if self.adversary is not None:
            self.adversary.observe(byzantine, gradient, outcome.weight)
        self.result.staleness.append(outcome.staleness)
        self.result.dropped += outcome.weight == 0.0
        if self.eval_every_gradients is not None:
            if self.result.gradients % self.eval_every_gradients == 0:
                self._evaluate()
        elif outcome.applied and outcome.version % self.eval_every == 0:
            self._evaluate()
        self._request(i)

    def _session_end(self, i: int) -> None:
        now = self.queue.now
        if self.rng.random() < self.timing.churn:
            self._join(start=now + self.timing.gap(self.rng))  # this device leaves, a newcomer joins
            return
        self.queue.schedule(now + self.timing.gap(self.rng), ("online", i))

    def run(
        self,
        *,
        until: float = math.inf,
        max_gradients: int | None = None,
        max_events: int | None = None,
        target: float | None = None,
        give_up: Callable[[FleetResult], bool] | None = None,
    ) -> FleetResult:
        """Process events until the virtual deadline, a gradient or event budget, the target accuracy, or
        ``give_up`` says the run is lost (checked after each evaluation: a collapsed model ends early)."""
        started = time.perf_counter()
        compute_start = self.backend.stats.seconds_compute
        self._evaluate()
        evaluated = len(self.result.accuracy)
        while self.queue and self.queue._heap[0][0] <= until:
            event = self.queue.pop()
            kind, i = event[0], event[1]
            if kind == "online":
                self.devices[i].online_until = self.queue.now + self.timing.session(self.rng)
                self._request(i)
            elif kind == "request":
                self._request(i)
            else:
                self._push(i, event[2], event[3])
            if max_gradients is not None and self.result.gradients >= max_gradients:
                break
            if max_events is not None and self.queue.popped >= max_events:
                break
            if target is not None and self.result.accuracy[-1] >= target:
                break
            if give_up is not None and len(self.result.accuracy) > evaluated and give_up(self.result):
                self.result.diverged = True
                break
            evaluated = len(self.result.accuracy)
            if self.result.diverged or not np.isfinite(self.core.run.params).all():
                self.result.diverged = True
                self._evaluate()
                break
        self.result.seconds_total = time.perf_counter() - started - self.eval_time
        self.result.seconds_compute += self.backend.stats.seconds_compute - compute_start
        self.result.end_time, self.result.end_updates = self.queue.now, self.core.run.version
        return self.result

    def devices_per_key(self) -> Counter[str | None]:
        """How many devices enrolled with each enrollment key id (None: no adversary, keys not tracked)."""
        return Counter(vd.key for vd in self.devices)

    def describe(self) -> dict[str, Any]:
        described = {"devices": len(self.devices), "strategy": repr(self.core.run.strategy)}
        if self.adversary is not None:
            described["adversary"] = repr(self.adversary)
        return described
