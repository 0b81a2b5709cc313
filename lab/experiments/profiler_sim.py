"""Simulated I-Prof vs MAUI on the device catalogue: bootstrap on training devices, compare on test ones.

Per seed: collect the bootstrap dataset on the 16 bootstrap devices (growing batches until 2x the SLO),
cold-start I-Prof (OLS on features → slope) and MAUI (global slope on batch size) from it, then let
the round-robin dispatcher alternate each of the 20 test devices' requests between them
(``sim.profiler_trial``). I-Prof runs the tuned settings `fleet serve` uses (``profiler.defaults``);
ε of the profiled quantity is 1% of the bootstrap's mean slope (the thesis's 0.1 ms is 1% of a
typical phone slope; energy per sample is smaller here than in the thesis, so its 6e-5 would switch
learning off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from profiler import IProf
from profiler.defaults import TUNED_PARAMS
from profiler.dispatch import RoundRobinDispatcher
from profiler.maui import MauiProfiler
from sim.bootstrap import collect_bootstrap
from sim.devices import CATALOG_PATH, DeviceSpec, load_catalog, split_roles
from sim.profiler_trial import run_trial

__all__ = ["NO_TIME_SLO_MS", "iprof_settings", "make_profilers", "simulate"]

NO_TIME_SLO_MS = 1e9  # the energy comparison sizes by energy alone
MAX_BATCH = 20_000
EPSILON_FRACTION = 0.01  # ε of I-Prof's profiled quantity, as a fraction of the bootstrap's mean slope


def make_profilers(
    kind: str, slo: float, rows: Sequence[dict[str, Any]], params: Mapping[str, Any] | None = None
) -> RoundRobinDispatcher:
    """I-Prof (``params``, default the tuned ones `fleet serve` runs) and MAUI fitted on bootstrap rows."""
    iprof = IProf(**iprof_settings(kind, slo, rows, TUNED_PARAMS if params is None else params))
    iprof.fit(rows, [r["time_slope_ms"] for r in rows], [r["energy_slope"] for r in rows])
    time_slo = slo if kind == "time" else NO_TIME_SLO_MS
    energy_slo = slo if kind == "energy" else None
    maui = MauiProfiler(time_slo_ms=time_slo, energy_slo=energy_slo, max_batch=MAX_BATCH).fit(
        [r["batch_size"] for r in rows], [r["time_ms"] for r in rows], [r["energy"] for r in rows]
    )
    return RoundRobinDispatcher([iprof, maui], ["iprof", "maui"])


def iprof_settings(
    kind: str, slo: float, rows: Sequence[dict[str, Any]], params: Mapping[str, Any]
) -> dict[str, Any]:
    """IProf keyword arguments for a time (ms) or an energy (% battery) SLO: ``params`` plus SLOs and ε."""
    key = "time_slope_ms" if kind == "time" else "energy_slope"
    epsilon = EPSILON_FRACTION * float(np.mean([r[key] for r in rows]))
    return {
        "time_slo_ms": slo if kind == "time" else NO_TIME_SLO_MS,
        "energy_slo": slo if kind == "energy" else None,
        "max_batch": MAX_BATCH,
        **params,
        ("time_epsilon" if kind == "time" else "energy_epsilon"): epsilon,
    }


def simulate(
    *,
    kind: str,
    slo: float,
    requests_per_device: int,
    seeds: Sequence[int],
    catalog: str | Path = CATALOG_PATH,
    runs_per_device: int = 3,
    params: Mapping[str, Any] | None = None,
    devices: tuple[Sequence[DeviceSpec], Sequence[DeviceSpec]] | None = None,
) -> list[dict[str, Any]]:
    """One run per seed: its task records, bootstrap size and the dispatcher's ε.

    ``devices`` = (bootstrap phones, compared phones); default the catalogue's bootstrap and test roles.
    """
    train, test = split_roles(load_catalog(catalog)) if devices is None else devices
    runs = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        rows = collect_bootstrap(
            train,
            time_slo_ms=slo if kind == "time" else None,
            energy_slo=slo if kind == "energy" else None,
            rng=rng,
            runs_per_device=runs_per_device,
        )
        dispatcher = make_profilers(kind, slo, rows, params)
        records = run_trial(test, dispatcher, rng=rng, requests_per_device=requests_per_device)
        epsilon = dispatcher.primary.time_epsilon if kind == "time" else dispatcher.primary.energy_epsilon
        runs.append({"seed": seed, "records": records, "bootstrap_rows": len(rows), "epsilon": epsilon})
    return runs
