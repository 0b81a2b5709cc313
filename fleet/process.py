"""A real coordinator process on loopback (`fleet serve` in a subprocess): for tests and the lab's
benchmarks and live experiments (lab/), which the wheel never imports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ENROLL, ADMIN = "e2e-enrollment-key", "e2e-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildProcess:
    """A child process to crash (``kill``: SIGKILL, no shutdown hooks, no flushing) or stop politely."""

    process: subprocess.Popen[bytes] | None = None
    stop_timeout = 10.0

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``stop_timeout``."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()


class ServerProcess(ChildProcess):
    """`python -m fleet.cli serve` with FLEET_* settings; start/kill/restart on the same database."""

    def __init__(self, workdir: Path, *, serve_args: tuple[str, ...] = (), **settings: object) -> None:
        self.workdir = workdir
        self.serve_args = serve_args  # e.g. ("--role", "api", "--workers", "2")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "FLEET_DATA_DIR": str(workdir),
            "FLEET_ENROLLMENT_KEY": ENROLL,
            "FLEET_ADMIN_TOKEN": ADMIN,
            "FLEET_RATE_LIMIT_PER_SECOND": "1000",
            "FLEET_RATE_LIMIT_BURST": "1000",
        }
        self.env.update({f"FLEET_{k.upper()}": str(v) for k, v in settings.items()})
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "server.log"

    def start(self, timeout: float = 60.0) -> ServerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fleet.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "warning",
                    *self.serve_args,
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/v1/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def admin(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
