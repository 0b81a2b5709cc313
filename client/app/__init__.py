"""The Fleet device app (Kivy): status, *Try the model*, settings, around the worker library.

Kivy is imported only by ``main`` and ``screens``; ``controller``, ``settings``, ``drawing`` and
``model`` are plain Python, so the tests and other front ends use them without a display.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["run"]


def run(folder: str | Path | None = None, *, size: tuple[int, int] | None = None) -> None:
    """Start the app (blocks until its window closes); ``folder`` overrides the user data directory."""
    os.environ.setdefault("KIVY_NO_ARGS", "1")  # our CLI owns sys.argv, not Kivy
    if size is not None:
        from kivy.config import Config

        Config.set("graphics", "width", str(size[0]))
        Config.set("graphics", "height", str(size[1]))
    from .main import FleetApp

    FleetApp(folder=folder).run()
