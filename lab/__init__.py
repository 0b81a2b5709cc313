"""The lab: Fleet's experiments (reproductions of the papers' figures) and benchmarks, outside the wheel.

Run from a checkout: ``python -m lab list``, ``python -m lab run NAME [--quick]``, ``python -m lab report``.
Every entry is an ``Experiment`` (lab/contract.py): a quick and a full ``Plan`` (dataclasses of its
parameters), ``run(plan, ctx) -> Result``, and its rendering; lab/runner.py owns names, seeds, the run
cache (lab/cache.py), the output files under docs/results/ and the progress bar.
"""

from __future__ import annotations

import os
from pathlib import Path

# One thread for numpy's BLAS (OpenBLAS) a process: the lab runs its simulations in a pool of
# FLEET_WORKERS processes, and OpenBLAS's own threads on top oversubscribed the cores (with two workers on
# two cores a 100k-float dot took 10x as long, and a robust run 2.4x). Set before numpy loads; the pool
# inherits it; a value set outside wins. OpenMP's is left alone: torch (Flower's side of `lab run peer`)
# reads that one.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
