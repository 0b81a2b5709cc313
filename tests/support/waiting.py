"""Polling a condition that a background thread will make true (an evaluation loop, a worker)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float = 5.0, poll: float = 0.005) -> None:
    """Return once ``condition()`` is truthy; AssertionError after ``timeout`` seconds."""
    done = threading.Event()
    for _ in range(int(timeout / poll)):
        if condition():
            return
        done.wait(poll)
    raise AssertionError("condition not met")
