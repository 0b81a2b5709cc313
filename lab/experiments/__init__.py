"""Reproductions of the seeds' figures and tables: one module per experiment, run by `fleet experiment NAME`.

Each experiment module exposes ``run(*, quick: bool, out_dir: Path, seed: int) -> dict`` that writes a
PNG plot, a JSON of the raw series with a top-level ``summary`` object, and a markdown table under
``docs/results/``, and returns the JSON it wrote. Register it in ``EXPERIMENTS`` below.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

# name → module (imported lazily: experiments pull in matplotlib and the simulator)
EXPERIMENTS: dict[str, str] = {
    "staleness": "lab.experiments.staleness",
    "iid": "lab.experiments.iid",
    "long-tail": "lab.experiments.long_tail",
    "pruning": "lab.experiments.pruning",
    "async-vs-sync": "lab.experiments.async_vs_sync",
    "wire-float16": "experiments.wire_float16",
    "profiler-time": "lab.experiments.profiler_time",
    "profiler-energy": "lab.experiments.profiler_energy",
    "profiler-tune": "lab.experiments.profiler_tune",
    "default-search": "lab.experiments.default_search",
    "adasgd-why": "lab.experiments.adasgd_why",
    "loss-guard": "lab.experiments.loss_guard",
    "dp-staleness": "lab.experiments.dp_staleness",
    "mapa": "lab.experiments.mapa",
    "vandijk": "lab.experiments.vandijk",
    "adp2sgd": "experiments.adp2sgd",
    "kardam": "lab.experiments.kardam",
    "wkafl": "lab.experiments.wkafl",
}

RESULTS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results"


def run_experiment(
    name: str, *, quick: bool = False, out_dir: Path = RESULTS_DIR, seed: int = 0, fresh: bool = False
) -> dict[str, Any]:
    """Run one registered experiment and return what it wrote to its JSON file.

    Runs are cached under ``out_dir/cache/`` keyed by every parameter and the code version
    (experiments/cache.py); ``fresh`` ignores what earlier invocations cached."""
    if fresh:
        from lab.cache import start_fresh

        start_fresh()
    try:
        module = importlib.import_module(EXPERIMENTS[name])
    except KeyError:
        raise ValueError(f"unknown experiment {name!r}; known: {sorted(EXPERIMENTS)}") from None
    return module.run(quick=quick, out_dir=out_dir, seed=seed)
