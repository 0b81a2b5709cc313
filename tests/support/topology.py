"""The scale-out topology under faults (issue 18): devices push through N API workers while an API
worker, the aggregator and Redis are each killed with SIGKILL and come back; afterwards every
acknowledged gradient must be applied exactly once (ledger.py) once the queue has drained."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fleet.topology import Topology, drained, queue_length
from tests.support.chaos import USER_LIMITS, Load, summarise
from tests.support.ledger import audit


def kill_each(topology: Topology) -> list[dict[str, Any]]:
    """The three faults, a few seconds apart: what each did and how long recovery took."""
    events: list[dict[str, Any]] = []
    started = time.monotonic()

    def note(what: str, **extra: Any) -> None:
        events.append({"at_s": round(time.monotonic() - started, 1), "what": what, **extra})

    time.sleep(3)
    before = set(topology.worker_pids())
    pid = topology.kill_worker()
    note("kill -9 an API worker", pid=pid)
    deadline = time.monotonic() + 30
    while set(topology.worker_pids()) - before == set() and time.monotonic() < deadline:
        time.sleep(0.1)
    note("a new API worker runs", pids=sorted(set(topology.worker_pids()) - before))
    time.sleep(2)
    assert topology.aggregator is not None
    topology.aggregator.kill()
    note("kill -9 the aggregator", queued=queue_length(topology.settings["database_url"]))  # type: ignore[arg-type]
    time.sleep(1)
    restart = time.monotonic()
    topology.aggregator.start()  # waits for the dead one's lease to lapse
    note("a new aggregator holds the lease", after_s=round(time.monotonic() - restart, 2))
    time.sleep(2)
    topology.redis.kill()
    note("kill -9 Redis")
    time.sleep(2)
    topology.redis.start()
    note("Redis back")
    return events


def kill_phase(
    workdir: Path, database_url: str, *, workers: int, devices: int, seconds: float
) -> dict[str, Any]:
    with Topology(workdir, database_url, workers=workers, **USER_LIMITS) as topology:
        load = Load(topology.url, devices, seconds, workdir / "load.json")
        events = kill_each(topology)
        result = load.result(timeout=seconds + 120)
        drain_s = drained(database_url)
        stopped = topology.aggregator
    ledger = audit(database_url, result["acknowledged"])
    return {
        "workers": workers,
        "devices": devices,
        "seconds": seconds,
        "events": events,
        "drain_s": round(drain_s, 2),
        "aggregator_exit": None if stopped is None or stopped.process is None else stopped.process.returncode,
        **summarise(result, ledger),
    }
