"""Offline bootstrap collection for I-Prof's cold start, as the thesis did it.

On each training (bootstrap-role) device, run tasks of growing batch size back to back until the time
reaches 2x the time SLO (and, with an energy SLO, the energy 2x the energy SLO), and record the
features read before each task with the measured slopes α = t/L and e/L. A few runs per device, with a
long idle between them, so the data holds cool and hot thermal states. The rows are what
``IProf.load_bootstrap`` reads; they also carry (batch_size, time_ms, energy) so MAUI's global
regression trains on the same data.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from profiler.features import ENERGY_FEATURES
from sim.cost import DeviceUnit
from sim.devices import DeviceSpec

__all__ = ["BOOTSTRAP_COLUMNS", "collect_bootstrap", "read_bootstrap_rows", "write_bootstrap"]

BOOTSTRAP_COLUMNS = (
    "device_model",
    "run",
    "batch_size",
    "time_ms",
    "energy",
    *ENERGY_FEATURES,
    "time_slope_ms",
    "energy_slope",
)


def collect_bootstrap(
    specs: Iterable[DeviceSpec],
    *,
    time_slo_ms: float | None,
    rng: np.random.Generator,
    energy_slo: float | None = None,
    runs_per_device: int = 3,
    start_batch: int = 8,
    growth: float = 1.25,
    gap_s: float = 1.0,
    rest_s: float = 600.0,
    max_tasks: int = 200,
) -> list[dict[str, Any]]:
    """Rows of (device_model, features, L, t, e, α_t, α_e) from growing-batch runs on each device.

    A run stops when every given SLO is reached twice over (``time_slo_ms=None``: energy alone).
    """
    if time_slo_ms is None and energy_slo is None:
        raise ValueError("give a time SLO, an energy SLO or both")
    rows: list[dict[str, Any]] = []
    for spec in specs:
        unit = DeviceUnit(spec, rng)
        for run in range(runs_per_device):
            batch = start_batch
            for _ in range(max_tasks):
                features = unit.features()
                cost = unit.run_task(batch)
                rows.append(
                    {
                        "device_model": spec.name,
                        "run": run,
                        "batch_size": batch,
                        "time_ms": cost.time_ms,
                        "energy": cost.energy,
                        **features,
                        "time_slope_ms": cost.time_ms / batch,
                        "energy_slope": cost.energy / batch,
                    }
                )
                time_done = time_slo_ms is None or cost.time_ms >= 2.0 * time_slo_ms
                energy_done = energy_slo is None or cost.energy >= 2.0 * energy_slo
                if time_done and energy_done:
                    break
                unit.idle(gap_s)
                batch = max(batch + 1, math.ceil(batch * growth))
            unit.idle(rest_s)
    return rows


def write_bootstrap(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as the CSV ``IProf.load_bootstrap`` reads (empty cell = feature not readable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=BOOTSTRAP_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in BOOTSTRAP_COLUMNS})
    return path


def read_bootstrap_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a bootstrap CSV, numbers as floats and empty cells as None."""
    with Path(path).open(newline="") as fh:
        out = []
        for row in csv.DictReader(fh):
            out.append(
                {
                    k: (v if k == "device_model" else (None if v.strip() == "" else float(v)))
                    for k, v in row.items()
                }
            )
        return out
