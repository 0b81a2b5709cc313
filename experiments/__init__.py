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
    "staleness": "experiments.staleness",
    "iid": "experiments.iid",
    "long-tail": "experiments.long_tail",
    "pruning": "experiments.pruning",
    "async-vs-sync": "experiments.async_vs_sync",
    "wire-float16": "experiments.wire_float16",
    "profiler-time": "experiments.profiler_time",
    "profiler-energy": "experiments.profiler_energy",
    "profiler-tune": "experiments.profiler_tune",
    "default-search": "experiments.default_search",
    "adasgd-why": "experiments.adasgd_why",
    "loss-guard": "experiments.loss_guard",
    "dp-staleness": "experiments.dp_staleness",
    "mapa": "experiments.mapa",
    "vandijk": "experiments.vandijk",
    "adp2sgd": "experiments.adp2sgd",
    "kardam": "experiments.kardam",
    "wkafl": "experiments.wkafl",
}

RESULTS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results"


def run_experiment(
    name: str, *, quick: bool = False, out_dir: Path = RESULTS_DIR, seed: int = 0, fresh: bool = False
) -> dict[str, Any]:
    """Run one registered experiment and return what it wrote to its JSON file.

    Runs are cached under ``out_dir/cache/`` keyed by every parameter and the code version
    (experiments/cache.py); ``fresh`` ignores what earlier invocations cached."""
    if fresh:
        from experiments.cache import start_fresh

        start_fresh()
    try:
        module = importlib.import_module(EXPERIMENTS[name])
    except KeyError:
        raise ValueError(f"unknown experiment {name!r}; known: {sorted(EXPERIMENTS)}") from None
    return module.run(quick=quick, out_dir=out_dir, seed=seed)
