"""The Fleet app: a Kivy ``App`` around ``AppController``; the worker runs only in the foreground."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kivy.app import App
from kivy.clock import Clock

from .controller import AppController
from .screens import Root

__all__ = ["FleetApp", "FrameMonitor", "rss_bytes"]


class FrameMonitor:
    """Intervals between drawn frames (Kivy's Clock ticks once per frame): a frozen UI shows as a long one."""

    def __init__(self) -> None:
        self.intervals: list[float] = []
        self._last: float | None = None

    def __repr__(self) -> str:
        return f"FrameMonitor(frames={len(self.intervals)})"

    def tick(self, *_: Any) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.intervals.append(now - self._last)
        self._last = now

    def reset(self) -> None:
        self.intervals, self._last = [], None

    def summary(self) -> dict[str, float]:
        """Frame count, mean/p95/max interval in ms."""
        if not self.intervals:
            return {"frames": 0, "mean_ms": 0.0, "p95_ms": 0.0, "max_ms": 0.0}
        ordered = sorted(self.intervals)
        return {
            "frames": len(ordered),
            "mean_ms": 1000.0 * sum(ordered) / len(ordered),
            "p95_ms": 1000.0 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "max_ms": 1000.0 * ordered[-1],
        }


def rss_bytes() -> tuple[int, int]:
    """(current, peak) resident set size of this process from /proc (Linux and Android); (0, 0) elsewhere."""
    found = {"VmRSS": 0, "VmHWM": 0}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in found:
                found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return found["VmRSS"], found["VmHWM"]


class FleetApp(App):
    """Status, *Try the model* and Settings over one ``AppController`` in the app's user data directory."""

    title = "Fleet"

    def __init__(self, folder: str | Path | None = None, controller: AppController | None = None, **kw: Any):
        super().__init__(**kw)
        self._folder = Path(folder) if folder else None
        self.controller: AppController | None = controller
        self.frames = FrameMonitor()

    def build(self) -> Root:
        if self.controller is None:
            folder = self._folder or Path(os.environ.get("FLEET_APP_DIR") or self.user_data_dir)
            self.controller = AppController(folder)
        root = Root()  # App.run() already loaded fleet.kv (the App's name, next to this module)
        Clock.schedule_interval(self.frames.tick, 0)
        Clock.schedule_interval(self.refresh, 0.5)
        return root

    def refresh(self, *_: Any) -> None:
        """Copy the controller's status into the status screen (cheap: a snapshot under a lock)."""
        if self.root is not None and self.controller is not None:
            self.root.ids.status.refresh(self.controller.status())

    def on_start(self) -> None:
        assert self.controller is not None
        self.controller.start()
        if not self.controller.settings.server_url:
            self.root.show("settings")
        else:
            self.root.show("status")

    def on_pause(self) -> bool:
        """Android put the app in the background: no tasks until it comes back."""
        if self.controller is not None:
            self.controller.stop()
        return True

    def on_resume(self) -> None:
        if self.controller is not None:
            self.controller.start()

    def on_stop(self) -> None:
        if self.controller is not None:
            self.controller.close()
