"""End-to-end tests start real coordinator processes through fleet.process."""

from __future__ import annotations

from fleet.process import ADMIN, ENROLL, free_port
from fleet.process import ServerProcess as _ServerProcess

__all__ = ["ADMIN", "ENROLL", "ServerProcess", "free_port"]


class ServerProcess(_ServerProcess):
    """A server process that, on its first start, moves to another port if its port was taken.

    free_port() closes the port before the server binds it, so another test run on the same machine
    can take it in between; a restart keeps its port, as the devices know only that one.
    """

    started = False

    def start(self, timeout: float = 60.0) -> ServerProcess:
        for attempt in range(3):
            try:
                super().start(timeout)
            except RuntimeError as exc:
                if self.started or attempt == 2 or "address already in use" not in str(exc).lower():
                    raise
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
                continue
            self.started = True
            return self
        raise AssertionError("unreachable")
