"""Faults under load, shared by the reliability tests and the lab's soak and chaos benchmarks: the load
(devices.py in its own process), a coordinator SIGKILLed under it and restarted, a PostgreSQL database
that goes away under it (its connections dropped and refused, or the whole server restarted). What must
hold: no answer is a 5xx other than 503, every 503 carries Retry-After, the service recovers by itself,
and every acknowledged gradient is stored, applied exactly once (ledger.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from fleet.process import ENROLL, ServerProcess
from tests.support.faults import (
    postgres_outage,
    restart_postgres_server,
)
from tests.support.ledger import audit

# the limits users run (ServerProcess loosens them for functional tests)
USER_LIMITS = {"rate_limit_per_second": 10, "rate_limit_burst": 30}


class Load:
    """tests/support/devices.py in its own process: it outlives coordinators killed under it."""

    def __init__(self, url: str, devices: int, seconds: float, out: Path) -> None:
        self.out = out
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.devices", url, ENROLL, str(devices), str(seconds)]
            + [str(out)],
            cwd=Path(__file__).resolve().parents[2],
        )

    def result(self, timeout: float) -> dict[str, Any]:
        if self.process.wait(timeout=timeout) != 0:
            raise RuntimeError(f"the load process failed ({self.process.returncode})")
        return json.loads(self.out.read_text())


def recovered_within(url: str, timeout: float = 60.0) -> float:
    """Seconds until the coordinator says ready again."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"{url}/v1/ready", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"not ready after {timeout} s")


def summarise(load: dict[str, Any], ledger: dict[str, Any]) -> dict[str, Any]:
    statuses: dict[str, int] = load["statuses"]
    return {
        "requests": sum(statuses.values()),
        "answers_503": sum(n for k, n in statuses.items() if k.endswith(" 503")),
        "answers_5xx_not_503": len(load["server_errors"]),
        "server_errors": load["server_errors"][:5],
        "missing_retry_after": load["missing_retry_after"],
        "connection_errors": load["connection_errors"],
        "pushes_given_up": load["gave_up"],
        "statuses": statuses,
        **{k: v for k, v in ledger.items() if k != "model_versions"},
    }


def _scheduled(
    seconds: float, events: int, settle: float, seed: int, act: Callable[[int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run ``act(i)`` at ``events`` random moments in (settle, seconds - settle)."""
    rng = random.Random(seed)
    moments = sorted(rng.uniform(settle, seconds - settle) for _ in range(events))
    started, done = time.monotonic(), []
    for i, at in enumerate(moments):
        time.sleep(max(0.0, at - (time.monotonic() - started)))
        done.append({"at_s": round(time.monotonic() - started, 1), **act(i)})
    return done


def kill_phase(
    workdir: Path, *, database_url: str | None, devices: int, seconds: float, kills: int, seed: int = 0
) -> dict[str, Any]:
    """SIGKILL the coordinator ``kills`` times at random moments under load, restarting it each time."""
    settings: dict[str, Any] = {**USER_LIMITS, **({"database_url": database_url} if database_url else {})}
    server = ServerProcess(workdir, **settings).start()
    url = database_url or f"sqlite:///{workdir / 'fleet.db'}"
    try:
        load = Load(server.url, devices, seconds, workdir / "kill-load.json")

        def kill(_: int) -> dict[str, Any]:
            server.kill()
            started = time.monotonic()
            server.start()
            return {"restart_s": round(time.monotonic() - started, 2)}

        restarts = _scheduled(seconds, kills, min(5.0, seconds / 4), seed, kill)
        result = load.result(timeout=seconds + 120)
    finally:
        server.stop()
    return {
        "devices": devices,
        "seconds": seconds,
        "kills": restarts,
        **summarise(result, audit(url, result["acknowledged"])),
    }


def outage_phase(
    workdir: Path,
    *,
    database_url: str,
    devices: int,
    seconds: float,
    outages: int,
    outage_s: float,
    restart_server: bool = False,
    seed: int = 1,
) -> dict[str, Any]:
    """Take the PostgreSQL database away ``outages`` times under load (connections dropped and refused
    for ``outage_s``, or with ``restart_server`` the PostgreSQL server restarted) and time recovery."""
    server = ServerProcess(workdir, database_url=database_url, **USER_LIMITS).start()
    try:
        load = Load(server.url, devices, seconds, workdir / "outage-load.json")

        def outage(_: int) -> dict[str, Any]:
            if restart_server:
                down = restart_postgres_server()
            else:
                with ExitStack() as stack:
                    stack.enter_context(postgres_outage(database_url))
                    time.sleep(outage_s)
                down = outage_s
            return {"down_s": round(down, 2), "ready_again_s": round(recovered_within(server.url), 2)}

        events = _scheduled(seconds, outages, min(5.0, seconds / 4), seed, outage)
        result = load.result(timeout=seconds + 120)
        alive = server.process is not None and server.process.poll() is None
    finally:
        server.stop()
    kind = "server restart" if restart_server else "connections dropped and refused"
    return {
        "devices": devices,
        "seconds": seconds,
        "fault": kind,
        "outages": events,
        "coordinator_survived": alive,
        **summarise(result, audit(database_url, result["acknowledged"])),
    }
