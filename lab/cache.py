"""The experiments' run cache: one JSON per run, keyed by every parameter and the code that computes it.

A cached run is reused only when its full specification (``job.spec()``: every field, the strategy
variant's parameters) and the version of the code that produces it (a hash of the sources of the
packages a run executes, and of the numeric libraries' versions) are the same. The cache lives next to
the results (``docs/results/cache/``, not committed): it lets a long run resume, never stands in for a
run of other code. ``python -m lab run NAME --fresh`` ignores what earlier invocations wrote (runs
written by the current one, e.g. a tuning run reused by a table, still count).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]  # the checkout (this file is lab/cache.py)
# what a cached run executes: the core and its strategies, the simulator, the models, the run functions
# (the profiler is not among them: simulated runs size batches with sim.harness.BatchSizer)
CODE = (
    "server",
    "sim",
    "models",
    "lab/experiments/protocol.py",
    "lab/experiments/async_vs_sync.py",
    "lab/experiments/default_search.py",
    "lab/experiments/default_search_judge.py",
    "lab/experiments/peer_fleets.py",
    "lab/experiments/robust.py",
    "lab/experiments/robust_suite.py",
    "lab/experiments/online_vs_standard.py",
    "lab/experiments/online_arms.py",
)
LIBRARIES = ("numpy", "onnxruntime", "scikit-learn")
FRESH_ENV = "FLEET_EXPERIMENT_FRESH"  # set to a start time (epoch seconds): older entries are ignored


class CachedJob(Protocol):
    """A unit of work the cache can key: a short readable label and its full specification."""

    def key(self) -> str: ...

    def spec(self) -> dict[str, Any]: ...


@cache
def code_version() -> str:
    """A hash of every source and data file under ``CODE`` and of the numeric libraries' versions."""
    digest = hashlib.sha256()
    for top in CODE:
        root = ROOT / top
        if not root.exists():  # a renamed path would silently leave the code out of the key
            raise FileNotFoundError(f"lab/cache.py CODE names {top}, which does not exist")
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".md"}:
                digest.update(str(path.relative_to(ROOT)).encode())
                digest.update(path.read_bytes())
    for name in LIBRARIES:
        digest.update(f"{name}=={metadata.version(name)}".encode())
    return digest.hexdigest()[:16]


def start_fresh() -> None:
    """Ignore every entry written before now, in this process and the worker processes it starts."""
    os.environ[FRESH_ENV] = repr(time.time())


def _valid_since() -> float:
    return float(os.environ.get(FRESH_ENV, "0") or 0)


def path_for(directory: Path, job: CachedJob) -> Path:
    """Where ``job``'s output is cached: its label, then a hash of its spec and the code version."""
    spec = json.dumps(job.spec(), sort_keys=True, default=str)
    digest = hashlib.sha256(f"{spec}|{code_version()}".encode()).hexdigest()[:16]
    return directory / f"{job.key()}-{digest}.json"


def load(directory: Path, job: CachedJob) -> dict[str, Any] | None:
    """The cached output of ``job`` for this code, or None (also for an entry older than a fresh start)."""
    path = path_for(directory, job)
    if not path.exists() or path.stat().st_mtime < _valid_since():
        return None
    return json.loads(path.read_text())


def store(directory: Path, job: CachedJob, output: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    output = {**output, "code_version": code_version()}
    path_for(directory, job).write_text(json.dumps(output))
