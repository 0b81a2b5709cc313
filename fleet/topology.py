"""The scale-out topology as real processes on loopback, for tests and the lab (`python -m lab run
scale-out`): N API workers (`fleet serve --role api --workers N`), one aggregator, a Redis of
its own (so a test may kill it), all on one PostgreSQL database."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fleet.process import ChildProcess, ServerProcess, free_port


class RedisProcess(ChildProcess):
    """A private `redis-server` on a free loopback port, without persistence (it only fans out)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir, self.port = workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(self.url).ping()
                return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.kill()  # it keeps nothing: no reason to wait for it


def queue_length(database_url: str) -> int:
    """Pushes queued and not applied yet, read straight from the database."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT count(*) FROM push_queue")).scalar_one())
    finally:
        engine.dispose()


def drained(database_url: str, timeout: float = 60.0) -> float:
    """Seconds until the queue is empty (the aggregator applied everything acknowledged)."""
    started = time.monotonic()
    while queue_length(database_url):
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the queue still holds {queue_length(database_url)} pushes after {timeout} s")
        time.sleep(0.1)
    return time.monotonic() - started


class AggregatorProcess(ChildProcess):
    """`fleet serve --role aggregator` with FLEET_* settings; ready once it holds the lease."""

    stop_timeout = 20.0

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir, self.env = workdir, {**env, "FLEET_ROLE": "aggregator"}
        self.log = workdir / "aggregator.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True, timeout: float = 60.0) -> AggregatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        mark = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fleet.cli", "serve", "--role", "aggregator"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while wait and time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"aggregator exited: {self.log.read_text()[-2000:]}")
            if "applying the queue" in self.log.read_text(errors="replace")[mark:]:
                return self
            time.sleep(0.1)
        if wait:
            raise RuntimeError("the aggregator did not take its lease in time")
        return self


class Topology:
    """API workers + aggregator + Redis on ``database_url`` (PostgreSQL)."""

    def __init__(self, workdir: Path, database_url: str, *, workers: int = 2, **settings: object) -> None:
        dp = settings.get("dp", os.environ.get("FLEET_DP", ""))
        if str(dp).strip().lower() in ("1", "true", "yes", "on"):  # pydantic's true values
            raise ValueError(
                "DP is on: the scale-out's API workers would each keep their own privacy ledger; run one"
                " process (FLEET_ROLE=all) with DP"
            )
        self.redis = RedisProcess(workdir / "redis")
        self.workers, self.workdir = workers, workdir
        self.settings = {"database_url": database_url, "aggregator_lease_seconds": 2.0, **settings}
        self.api: ServerProcess | None = None
        self.aggregator: AggregatorProcess | None = None

    @property
    def url(self) -> str:
        assert self.api is not None
        return self.api.url

    def start(self) -> Topology:
        self.redis.start()
        settings = {**self.settings, "redis_url": self.redis.url}
        self.api = ServerProcess(
            self.workdir / "api", serve_args=("--role", "api", "--workers", str(self.workers)), **settings
        )
        # the aggregator first: it adds the initial model that the workers then follow
        self.aggregator = AggregatorProcess(self.workdir / "aggregator", dict(self.api.env)).start()
        self.api.start()
        return self

    def worker_pids(self) -> list[int]:
        assert self.api is not None and self.api.process is not None
        pids = []
        for child in psutil.Process(self.api.process.pid).children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                    pids.append(child.pid)
            except psutil.Error:  # gone, or a zombie not reaped yet
                continue
        return pids

    def kill_worker(self) -> int:
        """SIGKILL one API worker process (uvicorn's supervisor starts a new one)."""
        pid = self.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        return pid

    def __enter__(self) -> Topology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for part in (self.api, self.aggregator, self.redis):
            if part is not None:
                part.stop()
