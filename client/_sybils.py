"""Sybils live: one process enrolls N devices with one enrollment key, all running one attack.

``fleet worker --attack sybil --sybils N`` runs ``run_sybils``. Each Sybil needs an install secret of its
own (the coordinator gives an install enrolling again its old device id: client/_state.py), so each gets
its own state folder under the worker's (``sybil-<i>``, or none: a fresh secret in memory) and its own
seed; they share the key, the data and the attack. Nothing else distinguishes them from N real phones,
which is the point: only a per-key quota (issue 30, part 4) can tell.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import httpx

from ._attacks import make_attack
from ._loop import RunSummary
from ._worker import Worker
from ._worker_config import WorkerConfig

__all__ = ["run_sybils", "sybil_configs"]


def sybil_configs(config: WorkerConfig, count: int | None = None) -> list[WorkerConfig]:
    """The ``count`` Sybils of ``config`` (default: the sybil attack's ``count`` parameter)."""
    if config.attack != "sybil":
        raise ValueError(f"Sybils run the sybil attack, not {config.attack!r}")
    params = dict(config.attack_params)
    if count is not None:
        params["count"] = count
    n = make_attack("sybil", **params).count  # type: ignore[attr-defined]  # validates the parameters
    seed = config.seed if config.seed is not None else 0
    return [
        replace(
            config,
            attack_params=params,
            seed=seed * 1000 + i,
            state_dir=None if config.state_dir is None else Path(config.state_dir) / f"sybil-{i}",
        )
        for i in range(n)
    ]


def run_sybils(
    config: WorkerConfig,
    count: int | None = None,
    *,
    stop_event: threading.Event | None = None,
    transport: httpx.BaseTransport | None = None,
) -> list[RunSummary]:
    """Run the Sybils of ``config`` in threads until each stops; their summaries, in order."""
    stop_event = stop_event if stop_event is not None else threading.Event()
    configs = sybil_configs(config, count)
    summaries: list[RunSummary | None] = [None] * len(configs)

    def one(i: int) -> None:
        with Worker(configs[i], transport=transport) as worker:
            summaries[i] = worker.run(stop_event)

    threads = [threading.Thread(target=one, args=(i,), name=f"sybil-{i}") for i in range(len(configs))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        stop_event.set()
        for thread in threads:
            thread.join()
    return [s if s is not None else RunSummary(stop_reason="failed") for s in summaries]
