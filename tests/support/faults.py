"""Faults to inject in a running system: a database that refuses connections, a database server
restart, a coordinator's memory as the kernel sees it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

# a database per run, and one database's outage: shared with the tests (tests/support/postgres.py)
from tests.support.postgres import (
    DEFAULT_POSTGRES,
    postgres_outage,
    postgres_server_url,
    scratch_postgres_database,
)

__all__ = [
    "DEFAULT_POSTGRES",
    "postgres_outage",
    "postgres_server_url",
    "restart_postgres_server",
    "rss_mib",
    "scratch_postgres_database",
]


def restart_postgres_server(timeout: float = 60.0) -> float:
    """Restart the whole local PostgreSQL server (every database on it); returns seconds until it
    accepts connections again. Only for a machine where nothing else is using that server."""
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    started = time.monotonic()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    while time.monotonic() - started < timeout:
        if subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"], check=False).returncode == 0:
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError("PostgreSQL did not come back")


def rss_mib(pid: int) -> float:
    """Resident set size of a process, MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
