"""Reproductions of the papers' figures and tables: one module per experiment, each with an
``EXPERIMENT`` (lab/contract.py), registered in lab/runner.py and run by ``python -m lab run NAME``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab import RESULTS
from lab.runner import EXPERIMENTS

__all__ = ["EXPERIMENTS", "run_experiment"]


def run_experiment(
    name: str, *, quick: bool = False, out_dir: Path = RESULTS, seed: int = 0, fresh: bool = False
) -> dict[str, Any]:
    """Run one experiment through the lab's runner and return its record (what its JSON holds)."""
    from lab.runner import run

    return run(name, quick=quick, out_dir=out_dir, seed=seed, fresh=fresh, progress=False).record()
