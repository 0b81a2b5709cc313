"""What issue 28's rule probes share: one command line (workloads, rules, seeds, workers) and their runs on
a process pool, one BLAS thread a worker, in the jobs' order."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

Job = TypeVar("Job")


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
