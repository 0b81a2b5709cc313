"""The Kivy widgets of the three screens. They only read ``AppController`` snapshots and call its quick
methods; every slow step (network, ONNX) runs on the controller's threads and comes back through
``mainthread``, so the UI never waits for a task."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
from kivy.app import App
from kivy.clock import mainthread
from kivy.graphics import Color, Line, Rectangle
from kivy.metrics import dp
from kivy.properties import ListProperty
from kivy.uix.boxlayout import BoxLayout
from kivy.uix.button import Button
from kivy.uix.screenmanager import Screen
from kivy.uix.widget import Widget

from .chart import TaskChart
from .controller import AppController, Status, TaskRow
from .drawing import strokes_to_image
from .model import Guess
from .settings import parse_enrollment_link, url_problem

__all__ = ["DrawingPad", "Root", "SettingsScreen", "StatusScreen", "TaskChart", "TryScreen"]

# red is for real problems only: the first run ("setup") and a rest are calm blue, not a fault
STATE_COLORS = {
    "training": (0.1, 0.5, 0.25, 1), "connected": (0.1, 0.5, 0.25, 1), "paused": (0.6, 0.45, 0.05, 1),
    "waiting": (0.6, 0.45, 0.05, 1), "error": (0.72, 0.15, 0.12, 1), "finished": (0.16, 0.38, 0.72, 1),
    "setup": (0.16, 0.38, 0.72, 1), "resting": (0.16, 0.38, 0.72, 1),
}  # fmt: skip
STATE_NAMES = {
    "training": "Training", "connected": "Connected", "paused": "Paused", "waiting": "Waiting",
    "error": "Problem", "finished": "Finished", "connecting": "Connecting", "stopped": "Stopped",
    "setup": "Getting started", "resting": "Resting",
}  # fmt: skip


def controller() -> AppController:
    return App.get_running_app().controller  # type: ignore[no-any-return, union-attr]


class Root(BoxLayout):
    """Screens above, tabs below."""

    def show(self, name: str) -> None:
        self.ids.screens.current = name
        for tab in ("status", "try", "settings"):  # a state set in code does not release the group
            self.ids[f"tab_{tab}"].state = "down" if tab == name else "normal"
        self.ids.screens.current_screen.on_shown()


class StatusScreen(Screen):
    state_color = ListProperty([0.3, 0.33, 0.4, 1])

    def on_shown(self) -> None:
        self.refresh(controller().status())

    def toggle_pause(self) -> None:
        control = controller()
        control.set_paused(not control.settings.paused)
        self.refresh(control.status())

    def refresh(self, status: Status) -> None:
        """Fill the labels and the chart from a controller snapshot (twice a second)."""
        ids = self.ids
        ids.state.text = STATE_NAMES.get(status.state, status.state.title())
        self.state_color = list(STATE_COLORS.get(status.state, (0.3, 0.33, 0.4, 1)))
        message = status.message
        if status.retry_at is not None:
            message += f"  Next try in {max(0.0, status.retry_at - time.time()):.0f} s."
        ids.message.text = message
        ids.task.text = status.task or f"Tasks done this session: {status.done}"
        ids.pause.text = "Resume" if controller().settings.paused else "Pause"
        ids.chart.rows = list(status.tasks)
        ids.rows.text = _table(status.tasks[-6:])
        ids.device.text = f"device {status.device_id}" if status.device_id else "not enrolled yet"


def _table(rows: tuple[TaskRow, ...] | list[TaskRow]) -> str:
    if not rows:
        return "No task yet."
    lines = ["ver  examples  time ms  SLO ms  energy %"]
    for r in reversed(rows):
        slo = f"{r.slo_time_ms:6.0f}" if r.slo_time_ms else "     -"
        energy = f"{r.energy:.5f}" if r.energy is not None else "-"
        late = r.slo_time_ms is not None and r.time_ms > r.slo_time_ms
        time_ms = f"[color=b8261f]{r.time_ms:7.0f}[/color]" if late else f"{r.time_ms:7.0f}"
        lines.append(f"v{r.version:<4d}{r.batch_size:8d}  {time_ms}  {slo}  {energy}")
    return "\n".join(lines)


class DrawingPad(Widget):
    """A square pad a finger or mouse draws on; ``strokes`` are in widget coordinates, y up."""

    strokes = ListProperty([])
    __events__ = ("on_drawn",)

    def on_drawn(self) -> None:
        pass

    def on_size(self, *_: Any) -> None:
        self.redraw()

    def on_pos(self, *_: Any) -> None:
        self.redraw()

    def clear(self) -> None:
        self.strokes = []
        self.redraw()

    def on_touch_down(self, touch: Any) -> bool:
        if not self.collide_point(*touch.pos):
            return False
        touch.grab(self)
        self.strokes.append([self._local(touch.pos)])
        self.redraw()
        return True

    def on_touch_move(self, touch: Any) -> bool:
        if touch.grab_current is not self:
            return False
        self.strokes[-1].append(self._local(touch.pos))
        self.redraw()
        return True

    def on_touch_up(self, touch: Any) -> bool:
        if touch.grab_current is not self:
            return False
        touch.ungrab(self)
        self.dispatch("on_drawn")
        return True

    def _local(self, pos: tuple[float, float]) -> tuple[float, float]:
        return (pos[0] - self.x, pos[1] - self.y)

    def redraw(self) -> None:
        self.canvas.clear()
        with self.canvas:
            Color(0.08, 0.09, 0.12, 1)
            Rectangle(pos=self.pos, size=self.size)
            Color(1, 1, 1, 1)
            for stroke in self.strokes:
                points = [c for x, y in stroke for c in (self.x + x, self.y + y)]
                if len(points) >= 4:
                    Line(points=points, width=dp(9), cap="round", joint="round")


class TryScreen(Screen):
    def on_kv_post(self, *_: Any) -> None:
        for digit in range(10):
            button = Button(text=str(digit), font_size="20sp")
            button.bind(on_press=lambda _b, d=digit: self.label(d))
            self.ids.labels.add_widget(button)

    def on_shown(self) -> None:
        self.ids.model.text = self._model_text()

    def image(self) -> np.ndarray:
        return strokes_to_image(self.ids.pad.strokes)

    def classify(self) -> None:
        if not self.ids.pad.strokes:
            return
        self.ids.guess.text = "Classifying..."
        controller().classify(self.image(), self._show)

    @mainthread
    def _show(self, guess: Guess | None, problem: str) -> None:
        if guess is None:
            self.ids.guess.text = f"[color=b8261f]{problem}[/color]"
        else:
            best = "   ".join(f"[b]{c}[/b] {p:.0%}" for c, p in guess.top)
            self.ids.guess.text = best + (f"\n[size=12sp]{problem}[/size]" if problem else "")
        self.ids.model.text = self._model_text()

    def label(self, digit: int) -> None:
        if not self.ids.pad.strokes:
            self.ids.guess.text = "Draw a digit first."
            return
        count = controller().add_drawing(self.image(), digit)
        self.ids.guess.text = f"Kept as a {digit}: {count} drawings to train on."
        self.ids.pad.clear()

    def clear(self) -> None:
        self.ids.pad.clear()
        self.ids.guess.text = "Top 3 appear here"

    def _model_text(self) -> str:
        model = controller().model
        drawn = len(controller().drawings)
        name = f"model v{model.version}" if model.version >= 0 else "model: none yet"
        return f"{name} | {drawn} drawings"


class SettingsScreen(Screen):
    def on_shown(self) -> None:
        s = controller().settings
        ids = self.ids
        ids.server_url.text, ids.enrollment_key.text = s.server_url, s.enrollment_key
        ids.battery.value, ids.unmetered.active = s.min_battery_percent, s.unmetered_only
        ids.note.text = ""

    def use_link(self) -> None:
        parsed = parse_enrollment_link(self.ids.link.text)
        if parsed is None:
            self.ids.note.text = "That is not an enrollment link (it needs a key and a coordinator URL)."
            return
        self.ids.server_url.text, self.ids.enrollment_key.text = parsed
        self.ids.link.text = ""
        self.ids.note.text = "Link read: tap Save."

    def save(self) -> None:
        ids = self.ids
        if ids.link.text.strip():
            self.use_link()
        url = ids.server_url.text.strip()
        problem = url_problem(url)
        if problem:
            ids.note.text = problem
            return
        control = controller()
        new = control.settings.with_server(url, ids.enrollment_key.text)
        new = replace(
            new,
            min_battery_percent=int(ids.battery.value),
            unmetered_only=bool(ids.unmetered.active),
        )  # pausing is the Status screen's one Pause/Resume button, never a second switch here
        try:
            control.update_settings(new)
        except OSError as exc:
            ids.note.text = f"Could not save the settings: {exc}"
            return
        ids.note.text = "Saved."
