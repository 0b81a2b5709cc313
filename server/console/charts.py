"""Plotly figure specs (plain dicts) for the console's charts, each drawn from one dataset.

The browser only hands these to ``Plotly.react``: what is drawn is decided here, in Python, from the
same rows the CSV/JSON downloads hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.console.figures import Row

Figure = dict[str, Any]


def _layout(x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "margin": {"l": 56, "r": 16, "t": 8, "b": 44},
        "xaxis": {"title": {"text": x_title}, "automargin": True},
        "yaxis": {"title": {"text": y_title}, "automargin": True},
        "showlegend": False,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        **extra,
    }


def _column(rows: list[Row], index: int) -> list[Any]:
    return [row[index] for row in rows]


def line(
    x: int, y: int, x_title: str, y_title: str, mode: str = "lines+markers"
) -> Callable[[list[Row]], Figure]:
    def figure(rows: list[Row]) -> Figure:
        trace = {"type": "scatter", "mode": mode, "x": _column(rows, x), "y": _column(rows, y)}
        return {"data": [trace], "layout": _layout(x_title, y_title)}

    return figure


def bins(x_title: str, y_title: str) -> Callable[[list[Row]], Figure]:
    """A histogram already counted on the server: rows of (low, high, count)."""

    def figure(rows: list[Row]) -> Figure:
        centres = [(lo + hi) / 2 for lo, hi, _ in rows]
        widths = [hi - lo for lo, hi, _ in rows]
        trace = {"type": "bar", "x": centres, "y": _column(rows, 2), "width": widths}
        return {"data": [trace], "layout": _layout(x_title, y_title, bargap=0.02)}

    return figure


def bars(x: int, y: int, x_title: str, y_title: str) -> Callable[[list[Row]], Figure]:
    def figure(rows: list[Row]) -> Figure:
        trace = {"type": "bar", "x": _column(rows, x), "y": _column(rows, y)}
        return {"data": [trace], "layout": _layout(x_title, y_title)}

    return figure


def per_minute(rows: list[Row]) -> Figure:
    """Counts per minute as bars one minute wide on a time axis (plotly's date widths are milliseconds)."""
    trace = {"type": "bar", "x": _column(rows, 0), "y": _column(rows, 1), "width": [54_000] * len(rows),
             "xperiod": 60_000, "xperiodalignment": "start"}  # fmt: skip
    layout = _layout("minute (UTC)", "gradients answered")
    layout["xaxis"]["type"] = "date"
    return {"data": [trace], "layout": layout}


def tasks(rows: list[Row]) -> Figure:
    """Granted tasks by status and rejected requests by reason, side by side."""
    traces = [
        {
            "type": "bar",
            "name": kind,
            "x": [r[1] for r in rows if r[0] == kind],
            "y": [r[2] for r in rows if r[0] == kind],
        }
        for kind in ("granted", "rejected")
    ]
    return {"data": traces, "layout": _layout("", "tasks", showlegend=True)}


def slo(rows: list[Row]) -> Figure:
    """Predicted and measured median task time per device model, with the SLO as a line."""
    names = _column(rows, 0)
    traces = [
        {"type": "bar", "name": "predicted p50", "x": names, "y": _column(rows, 2)},
        {"type": "bar", "name": "measured p50", "x": names, "y": _column(rows, 3),
         "error_y": {"type": "data", "array": _column(rows, 4), "visible": True}},
    ]  # fmt: skip
    shapes = []
    if rows:
        shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": rows[0][5], "y1": rows[0][5],
                   "line": {"dash": "dash", "color": "#c0392b"}}]  # fmt: skip
    return {
        "data": traces,
        "layout": _layout("device model", "task time (ms)", showlegend=True, shapes=shapes),
    }


def measured(rows: list[Row]) -> Figure:
    traces = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "predicted",
            "x": _column(rows, 0),
            "y": _column(rows, 2),
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "measured",
            "x": _column(rows, 0),
            "y": _column(rows, 3),
        },
    ]
    return {"data": traces, "layout": _layout("time", "task time (ms)", showlegend=True)}


def tau(rows: list[Row]) -> Figure:
    """Staleness over time, with AdaSGD's τ_thres as a line only when the strategy has one: a legend
    entry with nothing drawn under it is a question the page cannot answer."""
    traces = [
        {"type": "scatter", "mode": "markers", "name": "staleness", "x": _column(rows, 0),
         "y": _column(rows, 2), "marker": {"size": 4, "opacity": 0.5}},
    ]  # fmt: skip
    if any(row[3] is not None for row in rows):
        traces.append(
            {"type": "scatter", "mode": "lines", "name": "τ_thres (AdaSGD)", "x": _column(rows, 0),
             "y": _column(rows, 3)}
        )  # fmt: skip
    layout = _layout("answered at (UTC)", "versions", showlegend=len(traces) > 1)
    return {"data": traces, "layout": layout}


REFERENCE = "an older model"  # the reference line's name until the page names it (FLEET_EVAL_REFERENCE_LABEL)


def accuracy(x: int, x_title: str) -> Callable[[list[Row]], Figure]:
    """The metric against ``x``, and beside it, when evaluations carry one (FLEET_EVAL_REFERENCE_AGE_S), the
    same metric of an older model on the same data, dotted: the gap is what learning since then bought."""
    live = line(x, 1, x_title, "test accuracy")

    def figure(rows: list[Row]) -> Figure:
        drawn = live(rows)
        kept = [row for row in rows if row[4] is not None]
        if kept:
            drawn["data"][0]["name"] = "the model now"
            drawn["data"].append(
                {"type": "scatter", "mode": "lines", "name": REFERENCE, "x": _column(kept, x),
                 "y": _column(kept, 4), "line": {"dash": "dot"}}
            )  # fmt: skip
            drawn["layout"]["showlegend"] = True
            drawn["layout"]["legend"] = {"orientation": "h", "y": -0.25}
        return drawn

    return figure


@dataclass(frozen=True)
class Chart:
    dataset: str
    figure: Callable[[list[Row]], Figure]


def privacy(rows: list[Row]) -> Figure:
    """ε spent per device (the 60 that spent most), with the per-device budget as a line."""
    shown = rows[:60]
    trace = {"type": "bar", "x": [r[0][:8] for r in shown], "y": _column(shown, 4), "name": "ε (RDP)"}
    shapes = []
    if shown and shown[0][5] is not None:
        shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": shown[0][5], "y1": shown[0][5],
                   "line": {"dash": "dash", "color": "#c0392b"}}]  # fmt: skip
    return {"data": [trace], "layout": _layout("device", "ε spent", shapes=shapes)}


CHARTS: dict[str, Chart] = {
    "accuracy-versions": Chart("accuracy", accuracy(0, "model version")),
    "accuracy-time": Chart("accuracy", accuracy(3, "wall time (UTC)")),
    "updates": Chart("updates", per_minute),
    "tasks": Chart("tasks", tasks),
    "staleness": Chart("staleness", bars(0, 1, "staleness τ (versions)", "gradients")),
    "tau": Chart("tau", tau),
    "weights": Chart("weights", bins("applied weight", "gradients")),
    "similarity": Chart("similarity", bins("similarity to the global label counts", "tasks")),
    "slo": Chart("slo", slo),
    "measurements": Chart("measurements", measured),
    "privacy": Chart("privacy", privacy),
}
