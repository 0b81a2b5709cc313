"""The lab: Fleet's experiments (reproductions of the papers' figures) and benchmarks, outside the wheel.

Run from a checkout: ``python -m lab list``, ``python -m lab run NAME [--quick]``, ``python -m lab report``.
Every entry is an ``Experiment`` (lab/contract.py): a quick and a full ``Plan`` (dataclasses of its
parameters), ``run(plan, ctx) -> Result``, and its rendering; lab/runner.py owns names, seeds, the run
cache (lab/cache.py), the output files under docs/results/ and the progress bar.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
