"""What issue 28's rule probes share: one command line (workloads, rules, seeds, workers), their runs on a
process pool, one BLAS thread a worker, in the jobs' order; the shipped default run with a rule in it; and
one JSON line a run, judged against the search that reported the workload."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from server.strategies.base import Strategy

Job = TypeVar("Job")
PLAIN: dict[str, Any] = {}  # the search's own ``build``, before this process first replaced it


def rule_jobs(doc: str, rules: str) -> tuple[argparse.Namespace, list[tuple[str, str, int]]]:
    """The probe's arguments, and a job (workload, rule, seed) for each, seeds outside rules."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--rules", default=rules)
    parser.add_argument("--seeds", default="2")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    return args, [(w, r, s) for w in args.workloads for s in seeds for r in args.rules.split(",")]


def each_run(
    probe: Callable[[Job], dict[str, Any]], jobs: list[Job], workers: int
) -> Iterator[tuple[Job, Any]]:
    """Each job with its output, as they finish in order."""
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(workers, initializer=one_blas_thread) as pool:
        yield from zip(jobs, pool.map(probe, jobs), strict=True)


def run_default(
    name: str, seed: int, adapt: Callable[[Strategy], Strategy], *, scale: float = 1.0
) -> dict[str, Any]:
    """The shipped default (``SHIPPED``) on workload ``name`` at ``scale`` × its model's rate, in
    the search's simulator, with every strategy the run builds passed through ``adapt``. It replaces the
    search's ``build`` in this worker process only, and always wraps the first: a worker runs several jobs."""
    import lab.experiments.default_search as search
    from sim.workloads import workload

    arm, rates = search.SHIPPED
    model = workload(name).model
    plain = PLAIN.setdefault("build", search.build)
    search.build = lambda arm, lr: adapt(plain(arm, lr))  # type: ignore[assignment]
    lr = search.rate_for(rates, model) * scale
    return search.simulate(search.Run(search.arm_for(arm, rates, model), lr, name, seed))


def report(
    probe: Callable[[tuple[str, str, int]], dict[str, Any]],
    jobs: list[tuple[str, str, int]],
    workers: int,
    figures: Callable[[dict[str, Any]], dict[str, Any]] = lambda output: {},
) -> None:
    """Run ``jobs`` and print one JSON line each: the run's final, the search's target, best final and best
    run for the workload, the run's time to that target over the best's, and the probe's own ``figures``."""
    from lab.probes.adaptive_step import against_search
    from lab.probes.agreement_rate import searched_runs

    runs = searched_runs()
    for (name, rule, seed), output in each_run(probe, jobs, workers):
        print(json.dumps({
            "workload": name, "rule": rule, "seed": seed, "final": output["final"],
            **against_search(runs, name, output), "diverged": output["diverged"], **figures(output),
        }), flush=True)  # fmt: skip
