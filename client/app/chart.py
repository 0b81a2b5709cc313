"""The status screen's chart of the last tasks: compute time against the time SLO (left) and energy against
the energy SLO (right), each with a labelled scale in its unit, so a bar reads as a number, not a shape.

``scale`` and ``tick_text`` are plain arithmetic; ``TaskChart.panels`` keeps what the last redraw drew
(the scale, where the SLO line is) for tests and screenshots to check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kivy.core.text import Label as CoreLabel
from kivy.graphics import Color, Line, Rectangle
from kivy.metrics import dp
from kivy.properties import ListProperty
from kivy.uix.widget import Widget

from .controller import TaskRow

__all__ = ["Panel", "TaskChart", "scale", "tick_text"]

SLO_COLOR = (0.72, 0.15, 0.12, 1)
INK = (0.3, 0.33, 0.4, 1)


def scale(values: list[float], slo: float | None) -> float:
    """The top of the axis: a round number (1, 2, 2.5 or 5 x 10^k) above every bar and the SLO line."""
    peak = max([*values, slo or 0.0])
    if not peak > 0 or not math.isfinite(peak):
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(peak * 1.1))
    return next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= peak * 1.1)


def tick_text(value: float, unit: str) -> str:
    """A tick's label: 3 significant digits, never scientific notation for the small energy figures."""
    if value == 0:
        return f"0 {unit}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") + f" {unit}"


@dataclass(frozen=True)
class Panel:
    """What one half of the chart drew: its axis top, the SLO's height (None: no SLO known) in window y."""

    name: str
    unit: str
    top: float
    ticks: tuple[str, ...]
    slo: float | None
    slo_y: float | None
    left: float
    right: float


class TaskChart(Widget):
    """Bars of the last tasks, over a scale in ms (time) and % of battery (energy), with the SLO lines."""

    rows = ListProperty([])

    def __init__(self, **kw: Any) -> None:
        self.panels: dict[str, Panel] = {}
        super().__init__(**kw)

    def on_rows(self, *_: Any) -> None:
        self.redraw()

    def on_size(self, *_: Any) -> None:
        self.redraw()

    def on_pos(self, *_: Any) -> None:
        self.redraw()

    def redraw(self) -> None:
        self.canvas.clear()
        half = (self.width - dp(10)) / 2.0
        rows: list[TaskRow] = list(self.rows)
        slo_t = next((r.slo_time_ms for r in reversed(rows) if r.slo_time_ms), None)
        slo_e = next((r.slo_energy for r in reversed(rows) if r.slo_energy), None)
        with self.canvas:
            Color(1, 1, 1, 1)
            Rectangle(pos=self.pos, size=self.size)
            self.panels = {
                "time": self._panel("time", "ms", [r.time_ms for r in rows], slo_t, self.x, half),
                "energy": self._panel(
                    "energy", "%", [r.energy or 0.0 for r in rows], slo_e, self.x + half + dp(10), half
                ),
            }

    def _panel(
        self, name: str, unit: str, values: list[float], slo: float | None, left: float, width: float
    ) -> Panel:
        top = scale(values, slo)
        axis = dp(46)  # room for the tick labels
        base, height = self.y + dp(6), max(1.0, self.height - dp(14))
        x0, x1 = left + axis, left + width
        ticks = tuple(tick_text(top * f, unit) for f in (0.0, 0.5, 1.0))
        Color(*INK)
        Line(points=[x0, base, x0, base + height], width=1)
        for fraction, text in zip((0.0, 0.5, 1.0), ticks, strict=True):
            y = base + height * fraction
            Line(points=[x0 - dp(3), y, x0, y], width=1)
            self._text(text, x0 - dp(5), y, anchor="right")
        step = (x1 - x0) / max(len(values), 10)
        for i, value in enumerate(values):
            Color(*((0.85, 0.45, 0.1, 1) if slo is not None and value > slo else (0.2, 0.55, 0.35, 1)))
            size = (max(1.0, step - 2), max(1.0, height * value / top))
            Rectangle(pos=(x0 + i * step + 1, base), size=size)
        slo_y = None
        if slo is not None:
            slo_y = base + height * slo / top
            Color(*SLO_COLOR)
            Line(points=[x0, slo_y, x1, slo_y], dash_length=6, dash_offset=4, width=1)
            self._text(f"SLO {tick_text(slo, unit)}", x1 - dp(2), slo_y + dp(7), anchor="right")
        else:
            Color(*INK)
            self._text(f"no {name} SLO set", x1 - dp(2), base + height - dp(7), anchor="right")
        return Panel(name, unit, top, ticks, slo, slo_y, x0, x1)

    def _text(self, text: str, x: float, y: float, *, anchor: str) -> None:
        """A small label in the canvas, centred on ``y``, ending at ``x`` (anchor right) or starting there."""
        label = CoreLabel(text=text, font_size=dp(10))  # white: tinted by the current Color
        label.refresh()
        texture = label.texture
        w, h = texture.size
        Rectangle(texture=texture, pos=(x - w if anchor == "right" else x, y - h / 2.0), size=(w, h))
