"""A coordinator app in the test's own process, with the surface of a real server process.

Device workers talk to it through Starlette's TestClient (an ``httpx.Client`` over ASGI): the same
routes, schemas, auth and wire encoding as over loopback, without a process to start. Tests of a strategy's
grants and charges use it; each mechanism keeps one test over real HTTP (tests/test_end_to_end.py,
test_privacy_end_to_end.py, test_tls.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import httpx

from client import Worker, WorkerConfig
from tests.conftest import ADMIN, ENROLL, settings_for


class InProcessServer:
    """``fleet serve``'s app on ``database_url``; ``stop``/``start`` is a clean restart on the same data."""

    def __init__(self, workdir: Path, *, database_url: str, **settings: Any) -> None:
        self.settings = settings_for(workdir, database_url=database_url, **settings)
        self.http: Any = None

    def start(self) -> InProcessServer:
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from starlette.testclient import TestClient

        from server.api.app import create_app

        self.http = TestClient(create_app(self.settings))
        self.http.__enter__()
        return self

    def stop(self) -> None:
        if self.http is not None:
            self.http.__exit__(None, None, None)
            self.http = None

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, **kwargs)

    def admin(self, path: str) -> httpx.Response:
        return self.http.get(path, headers={"Authorization": f"Bearer {ADMIN}"})

    def worker(self, data: Any, *, on_event: Any = None, **config: Any) -> Worker:
        """A device worker (``config``: WorkerConfig's fields) whose requests go to this app."""
        settings = WorkerConfig(base_url=str(self.http.base_url), enrollment_key=ENROLL, data=data, **config)
        return Worker(settings, client=self.http, on_event=on_event)
