"""Controlled runs: one device at a time, staleness imposed by the staleness controller.

This is the engine of the thesis's figures 3.8-3.10 and 3.15. Each step a device (drawn uniformly)
asks the coordinator core for a task, samples its mini-batch with replacement from its shard, computes
the real gradient with the ONNX training graph on the version it was handed, and pushes it. The test
set is evaluated every ``eval_every`` model updates. Random streams are split per purpose from the
seed, so for one seed every strategy sees the same devices, staleness draws and mini-batch indices.
With ``RunConfig.dp`` a task is a DP-SGD step over the device's whole part instead (client/_privacy.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from client import GradientSession
from client._privacy import DPGradientSession, private_gradient
from client._worker import scaled_counts
from fleet_protocol import Bundle
from server.core.admission import AdmissionController
from server.core.coordinator import Coordinator
from server.core.errors import InvalidInput
from server.core.evaluation import Evaluator
from server.core.types import Device, PushOutcome, TaskGrant, TaskRequest, TaskResult
from server.strategies import Strategy
from sim.data import Dataset
from sim.harness import BatchSizer, VirtualClock, build_core
from sim.staleness import Gaussian, StalenessController

FEATURES: dict[str, float | None] = {"available_memory": 1e9, "total_memory": 4e9}


@dataclass(frozen=True)
class DPSetting:
    """DP-SGD per task as Fleet's worker runs it: each example's gradient clipped to ``clip`` (C), noise of
    standard deviation ``noise_multiplier`` × C (σ) added to the clipped sum."""

    clip: float
    noise_multiplier: float


@dataclass
class RunConfig:
    """One run of one strategy on one seed (all the fixed parameters of the issue have defaults)."""

    strategy_factory: Callable[[], Strategy]
    parts: list[np.ndarray]
    seed: int
    staleness: Gaussian | None = None  # None: every task on the newest version (SSGD, τ = 0)
    long_tail: tuple[int, int] | None = None
    batch_mean: int = 100
    batch_std: float = 0.0
    admission: AdmissionController | None = None
    cap: int = 3000  # model updates
    eval_every: int = 20
    target: float = 0.80
    stop_at_target: bool = False
    recall_class: int | None = None
    max_requests: int | None = None  # a budget of task requests instead of updates (pruning)
    stop_recall: float | None = None  # stop once recall_class's recall ≥ this with accuracy ≥ 0.5
    dp: DPSetting | None = None  # None: the plain gradient on a batch drawn with replacement


@dataclass
class RunResult:
    updates: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    gradients: int = 0
    requests: int = 0
    rejected: int = 0
    diverged: bool = False
    seconds_gradient: float = 0.0
    seconds_total: float = 0.0
    device_tasks: dict[int, int] = field(default_factory=dict)  # device index → tasks granted to it

    def first_update_at(self, threshold: float) -> int | None:
        """The first evaluated update count with accuracy ≥ threshold."""
        return next((u for u, a in zip(self.updates, self.accuracy, strict=True) if a >= threshold), None)

    def first_recall_at(self, threshold: float, accuracy: float = 0.5) -> int | None:
        """The first update where the tracked class's recall ≥ threshold, counted once accuracy ≥ 0.5."""
        points = zip(self.updates, self.accuracy, self.recall, strict=False)
        return next((u for u, a, r in points if a >= accuracy and r >= threshold), None)

    @property
    def status(self) -> str:
        fell_back = bool(self.accuracy) and self.accuracy[-1] < 0.2 and max(self.accuracy) >= 0.2
        if self.diverged or (fell_back and self.first_update_at(0.8) is None):
            return "diverged"
        return "reached" if self.first_update_at(0.8) is not None else "not reached"

    def to_dict(self) -> dict[str, Any]:
        return {
            "updates": self.updates,
            "accuracy": self.accuracy,
            "loss": self.loss,
            "recall": self.recall,
            "gradients": self.gradients,
            "requests": self.requests,
            "rejected": self.rejected,
            "status": self.status,
        }


class Workbench:
    """What every run of an experiment shares: data, the model bundle, the ONNX sessions."""

    def __init__(self, bundle: Bundle, train: Dataset, test: Dataset) -> None:
        self.bundle, self.train, self.test = bundle, train, test
        self.gradients = GradientSession(bundle.manifest, bundle.train_onnx, threads=1)
        self.evaluator = Evaluator(bundle.manifest, bundle.infer_onnx, test.x, test.y)
        self.num_classes = bundle.manifest.num_classes

    @cached_property
    def dp_gradients(self) -> DPGradientSession:
        """The per-example-clipped graph's session, built on first use: only DP runs pay for it."""
        if self.bundle.dp_onnx is None:
            raise ValueError(f"model {self.bundle.manifest.name!r} has no DP graph (dp_train.onnx)")
        return DPGradientSession(self.bundle.manifest, self.bundle.dp_onnx, threads=1)

    def evaluate(self, params: np.ndarray, recall_class: int | None) -> tuple[float, float, float | None]:
        if not np.isfinite(params).all():
            return 0.0, math.inf, 0.0 if recall_class is not None else None
        accuracy, loss = self.evaluator.evaluate(params)
        recall = None
        if recall_class is not None:
            recall = float(self.evaluator.per_class_recall(params)[recall_class])
        return accuracy, loss, recall


def stream(seed: int, purpose: int) -> np.random.Generator:
    """An independent random stream per purpose, the same for every strategy of one seed."""
    return np.random.default_rng([seed, purpose])


def run_controlled(bench: Workbench, config: RunConfig) -> RunResult:
    """Train until ``cap`` updates (or the target, or divergence) and return the evaluated curve."""
    started = time.perf_counter()
    clock = VirtualClock()
    controller = (
        StalenessController(config.staleness, stream(config.seed, 1), config.long_tail)
        if config.staleness is not None
        else None
    )
    core = build_core(
        bench.bundle,
        config.strategy_factory,
        clock=clock,
        sizer=BatchSizer(mean=config.batch_mean, std=config.batch_std, rng=stream(config.seed, 3)),
        admission=config.admission,
        version_policy=controller,
    )
    devices = [core.enroll(f"sim-{i % 7}")[0] for i in range(len(config.parts))]
    local_counts = [np.bincount(bench.train.y[p], minlength=bench.num_classes) for p in config.parts]
    pick, sample = stream(config.seed, 0), stream(config.seed, 2)
    if config.dp is not None:
        # DP runs draw Poisson samples and noise from their own seeded stream: reproducible, which only a
        # simulation may be (a device's worker seeds every step from the OS: client/_privacy.py)
        sample = stream(config.seed, 4)
    result = RunResult()

    def evaluate(version: int) -> None:
        accuracy, loss, recall = bench.evaluate(core.run.served(), config.recall_class)
        result.updates.append(version)
        result.accuracy.append(accuracy)
        result.loss.append(loss)
        if recall is not None:
            result.recall.append(recall)

    evaluate(0)
    while core.run.version < config.cap:
        if config.max_requests is not None and result.requests >= config.max_requests:
            break
        d = int(pick.integers(len(devices)))
        result.requests += 1
        clock.now += 1.0
        grant = core.request_task(TaskRequest(devices[d], FEATURES, local_counts[d]))
        if not isinstance(grant, TaskGrant):
            result.rejected += 1
            continue
        result.device_tasks[d] = result.device_tasks.get(d, 0) + 1  # granted tasks: what a ledger charges
        push = _compute_and_push if config.dp is None else _compute_and_push_private
        outcome = push(bench, core, devices[d], config, d, grant, sample, result)
        if outcome is None:
            break
        result.staleness.append(outcome.staleness)
        result.weights.append(outcome.weight)
        if outcome.applied and outcome.version % config.eval_every == 0:
            evaluate(outcome.version)
            if _stops_after_evaluation(result, config):
                break
    if config.max_requests is not None and (not result.updates or result.updates[-1] != core.run.version):
        evaluate(core.run.version)
    result.seconds_total = time.perf_counter() - started
    return result


def _compute_and_push(
    bench: Workbench,
    core: Coordinator,
    device: Device,
    config: RunConfig,
    d: int,
    grant: TaskGrant,
    sample: np.random.Generator,
    result: RunResult,
) -> PushOutcome | None:
    """The task's real gradient on a mini-batch of the device's part, pushed; None once the run diverged."""
    batch = sample.choice(config.parts[d], size=grant.batch_size, replace=True)
    params = core.catalog.params(grant.model_id, grant.version)
    t0 = time.perf_counter()
    loss, gradient = bench.gradients.loss_and_gradient(params, bench.train.x[batch], bench.train.y[batch])
    result.seconds_gradient += time.perf_counter() - t0
    counts = np.bincount(bench.train.y[batch], minlength=bench.num_classes)
    return _push(core, device, grant, result, float(loss), gradient, counts, int(grant.batch_size))


def _compute_and_push_private(
    bench: Workbench,
    core: Coordinator,
    device: Device,
    config: RunConfig,
    d: int,
    grant: TaskGrant,
    sample: np.random.Generator,
    result: RunResult,
) -> PushOutcome | None:
    """A DP-SGD step over the device's whole part (Poisson rate q = B/N), pushed as the worker pushes it:
    batch size B and the part's label mix scaled to B, never the sampled batch's (client/_worker.py)."""
    assert config.dp is not None
    part = config.parts[d]
    expected = min(int(grant.batch_size), len(part))
    params = core.catalog.params(grant.model_id, grant.version)
    t0 = time.perf_counter()
    private = private_gradient(
        bench.dp_gradients,
        params,
        bench.train.x[part],
        bench.train.y[part],
        clip=config.dp.clip,
        noise_multiplier=config.dp.noise_multiplier,
        expected_batch=expected,
        rng=sample,  # seeded: reproducible runs (a simulation only; a real device seeds from the OS)
    )
    result.seconds_gradient += time.perf_counter() - t0
    local = np.bincount(bench.train.y[part], minlength=bench.num_classes)
    counts = np.asarray(scaled_counts(local.tolist(), expected))
    loss = private.loss if math.isfinite(private.loss) else 0.0  # an empty Poisson draw: no local loss
    return _push(core, device, grant, result, loss, private.gradient, counts, expected)


def _push(
    core: Coordinator,
    device: Device,
    grant: TaskGrant,
    result: RunResult,
    loss: float,
    gradient: np.ndarray,
    counts: np.ndarray,
    batch_size: int,
) -> PushOutcome | None:
    """Submit one computed gradient; None (and the run marked diverged) if it is not finite or refused."""
    result.gradients += 1
    if not (math.isfinite(loss) and np.isfinite(gradient).all()):
        result.diverged = True
        return None
    body = TaskResult(counts, loss, 1.0, None, batch_size, gradient, grant.task_id)
    try:
        return core.submit(device, grant.task_id, body)
    except InvalidInput:
        result.diverged = True
        return None


def _stops_after_evaluation(result: RunResult, config: RunConfig) -> bool:
    """Whether the newest evaluation ends the run: divergence, the target, or the recall criterion."""
    if not math.isfinite(result.loss[-1]):
        result.diverged = True
        return True
    if config.stop_at_target and result.accuracy[-1] >= config.target:
        return True
    return config.stop_recall is not None and result.first_recall_at(config.stop_recall) is not None
