"""The fixed comparison protocol shared by `staleness`, `iid` and `long-tail` (issue #3).

100 devices × 40 digits (sorted by label, 200 shards of 20, 2 per device) or an IID split; batch 100
with replacement; K = 1; τ clipped to [0, 60]; evaluation every 20 updates; cap 3,000 updates.
Learning rates are tuned on seed 1000 with D2 over one grid and budget for every strategy;
protocol (a) runs every strategy at DynSGD's best rate, protocol (b) each at its own. Jobs are pure
functions of their arguments, run in a process pool, and cached as JSON so a long run resumes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from lab import cache
from lab.contract import Context

LR_GRID = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
TUNE_SEED = 1000
SEEDS = (1, 2, 3, 4, 5)
SSGD_ROUND = 10  # gradients per SSGD step (one per selected device, all on one version)

# the AdaSGD variant each run uses, stated in every table
ADASGD_DEFAULT = {"staleness_cap": True, "boost_floor": 0.1, "boost_scope": "all", "global_counts": "samples"}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "adasgd": ("adasgd", ADASGD_DEFAULT),
    "adasgd-weighted": ("adasgd", {**ADASGD_DEFAULT, "global_counts": "weighted"}),
    "adasgd-stragglers": ("adasgd", {**ADASGD_DEFAULT, "boost_scope": "stragglers"}),
    "dynsgd": ("dynsgd", {}),
    "fedavg-async": ("fedavg-async", {}),
    "fedbuff": ("fedbuff", {"k": 1}),
    "ssgd": ("ssgd", {}),  # k = Job.ssgd_round
    "dynsgd-clip": ("dynsgd-clip", {}),  # Fleet's default from issue 19 to 28: run at its own rate, untuned
    "fedbuff-equal": ("fedbuff-equal", {}),  # Fleet's default since issue 28: at its own rate, untuned
}


@dataclass(frozen=True)
class Job:
    """One run: a strategy variant at one learning rate on one seed and staleness setting."""

    variant: str
    lr: float
    seed: int
    dist: str  # "D1", "D2" or "none"
    partition: str = "sorted"
    cap: int = 3000
    stop_at_target: bool = True
    long_tail: tuple[int, int] | None = None
    tau_thres: float | None = None
    recall_class: int | None = None
    devices: int = 100
    samples: int = 40
    batch_std: float = 0.0
    size_drop: float = 0.0
    similarity_drop: float = 0.0
    max_requests: int | None = None
    stop_recall: float | None = None
    ssgd_round: int = SSGD_ROUND  # gradients per SSGD step (ssgd only)
    dp: tuple[float, float] | None = None  # (clip C, noise multiplier σ): DP-SGD over each device's part

    def key(self) -> str:
        """A short readable label (the cache adds a hash of ``spec()``)."""
        dp = f"_dp{self.dp[1]}" if self.dp is not None else ""
        return f"{self.variant}_lr{self.lr}_s{self.seed}_{self.dist}_{self.partition}_c{self.cap}{dp}"

    def strategy(self) -> tuple[str, dict[str, Any]]:
        """The strategy's registered name and every parameter it is built with."""
        name, params = VARIANTS[self.variant]
        params = {**params, "learning_rate": self.lr}
        if name == "ssgd":
            params["k"] = self.ssgd_round
        if self.tau_thres is not None and name == "adasgd":
            params["tau_thres"] = self.tau_thres
        return name, params

    def spec(self) -> dict[str, Any]:
        """Everything the run depends on besides the code: every field and the strategy's parameters.

        ``dp`` is listed only when set, so a job without DP keeps the spec it had before the field."""
        job = asdict(self)
        if self.dp is None:
            del job["dp"]
        return {"job": job, "strategy": self.strategy()}


def strategy_factory(job: Job) -> Callable[[], Any]:
    from server.strategies import make_strategy

    name, params = job.strategy()
    return lambda: make_strategy(name, **params)


def workbench() -> Any:
    """One Workbench per worker process (ONNX sessions and data are loaded once): sim.scenario's."""
    from sim.scenario import workbench as shared

    return shared("mnist_cnn")


def partition(job: Job, labels: np.ndarray) -> list[np.ndarray]:
    """The job's shards: the seed fixes which digits and which shards each device gets."""
    from sim.data import partition_iid, partition_sorted_shards

    rng = np.random.default_rng([job.seed, 7])
    pool = np.sort(rng.choice(len(labels), job.devices * job.samples, replace=False))
    if job.partition == "iid":
        return [pool[p] for p in partition_iid(len(pool), job.devices, rng)]
    return [pool[p] for p in partition_sorted_shards(labels[pool], job.devices, rng)]


def run_job(job: Job) -> dict[str, Any]:
    """Run one job in this process and return its curve and summary numbers."""
    from server.core.admission import AdmissionController
    from sim.controlled import DPSetting, RunConfig, run_controlled
    from sim.staleness import D1, D2

    bench = workbench()
    config = RunConfig(
        strategy_factory=strategy_factory(job),
        parts=partition(job, bench.train.y),
        seed=job.seed,
        staleness={"D1": D1, "D2": D2}.get(job.dist),
        long_tail=job.long_tail,
        cap=job.cap,
        stop_at_target=job.stop_at_target,
        recall_class=job.recall_class,
        batch_std=job.batch_std,
        admission=AdmissionController(size_drop=job.size_drop, similarity_drop=job.similarity_drop),
        max_requests=job.max_requests,
        stop_recall=job.stop_recall,
        dp=DPSetting(*job.dp) if job.dp is not None else None,
    )
    result = run_controlled(bench, config)
    return {
        "job": asdict(job),
        **result.to_dict(),
        "updates_to_80": result.first_update_at(0.8),
        "weights": [round(w, 5) for w in result.weights] if job.long_tail else [],
        "staleness": result.staleness if job.long_tail else [],
        "recall_50_at": result.first_recall_at(0.5) if job.recall_class is not None else None,
        "seconds_gradient": result.seconds_gradient,
        "seconds_total": result.seconds_total,
        **({"max_device_tasks": max(result.device_tasks.values(), default=0)} if job.dp is not None else {}),
    }


def one_blas_thread() -> None:
    """A pool worker's initializer: numpy's BLAS on one thread. Two workers on two cores, each with
    OpenBLAS's default thread per core, fought over them: a 100k-float dot took 10x as long, a robust run
    2.4x (2026-11-29). Only the pool's workers: a `fleet serve` the lab starts runs as users run it."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


@dataclass
class Runner:
    """Runs jobs in a pool of ``workers`` processes, caching each result (lab/cache.py).

    A job is any hashable, picklable value with ``key()`` and ``spec()``; ``work`` (a module-level
    function, so the pool can pickle it) turns one into its JSON-able output. ``ctx`` (the lab
    runner's context) shows the runs on its progress bar.
    """

    cache: Path
    workers: int = field(default_factory=lambda: int(os.environ.get("FLEET_WORKERS", "2")))
    ctx: Context | None = None
    work: Callable[[Any], dict[str, Any]] = run_job

    @classmethod
    def of(cls, ctx: Context, workers: int | None = None, **kwargs: Any) -> Runner:
        """The runner of a lab run: its cache directory and progress bar; ``workers`` None: the default."""
        return cls(ctx.cache, ctx=ctx, **({"workers": workers} if workers else {}), **kwargs)

    def run(self, jobs: Sequence[Any]) -> dict[Any, dict[str, Any]]:
        done: dict[Any, dict[str, Any]] = {}
        todo = []
        for job in dict.fromkeys(jobs):
            output = cache.load(self.cache, job)
            if output is None:
                todo.append(job)
            else:
                done[job] = output
        if not todo:
            return done
        with (self.ctx or Context("")).steps(f"{len(todo)} runs", len(todo)) as steps:
            if self.workers <= 1:
                outputs = map(self.work, todo)
                pool = None
            else:
                pool = ProcessPoolExecutor(self.workers, initializer=one_blas_thread)
                outputs = pool.map(self.work, todo)
            try:
                for job, output in zip(todo, outputs, strict=True):
                    cache.store(self.cache, job, output)
                    done[job] = output
                    steps.advance()
            finally:
                if pool is not None:  # on an error, the runs not started yet are dropped, not waited for
                    pool.shutdown(cancel_futures=True)
        return done


def tune_sequence(jobs: Sequence[Job], directory: Path) -> list[dict[str, Any]]:
    """Run one strategy's grid from the largest rate down, each capped at the best updates-to-80% so far.

    A smaller rate that has not reached 80% by then cannot win, so the argmin is unchanged; the cut
    only saves compute. Results are cached like ``Runner``'s (an uncut run stands in for a cut one).
    """
    outputs, best = [], None
    for job in sorted(jobs, key=lambda j: -j.lr):
        full = job
        if best is not None:
            job = replace(job, cap=min(job.cap, best))
        output = cache.load(directory, full) or cache.load(directory, job)
        if output is None:
            output = run_job(job)
            cache.store(directory, job, output)
        if output["updates_to_80"] is not None:
            best = output["updates_to_80"] if best is None else min(best, output["updates_to_80"])
        outputs.append(output)
    return outputs


def tune(runner: Runner, grids: dict[str, list[Job]]) -> dict[str, dict[float, dict[str, Any]]]:
    """Tune every strategy's rate (one strategy per worker); returns variant → rate → output."""
    names = list(grids)
    args = [grids[n] for n in names]
    if runner.workers <= 1:
        results = [tune_sequence(a, runner.cache) for a in args]
    else:
        with ProcessPoolExecutor(runner.workers) as pool:
            results = list(pool.map(tune_sequence, args, [runner.cache] * len(args)))
    return {n: {o["job"]["lr"]: o for o in outs} for n, outs in zip(names, results, strict=True)}


def score(output: dict[str, Any]) -> tuple[float, float]:
    """Tuning order: fewer updates to 80% first; runs that never reach it rank by final accuracy."""
    reached = output["updates_to_80"]
    final = output["accuracy"][-1] if output["accuracy"] else 0.0
    if output["status"] == "diverged":
        final = -1.0
    return (reached if reached is not None else 1e9, -final)


def best_lr(outputs: dict[float, dict[str, Any]]) -> float:
    return min(sorted(outputs), key=lambda lr: score(outputs[lr]))
