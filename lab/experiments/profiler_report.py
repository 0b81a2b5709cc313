"""Figures, tables and the JSON summary of the I-Prof vs MAUI experiments (time and energy, sim and live).

A deviation is |cost − SLO| of one task; it is reported in the SLO's unit and as a fraction of the SLO.
The figure has one row per mode (simulation, live): the CDF of the deviation for both profilers, the
distribution of the batch sizes each chose, and the signed error (cost − SLO)/SLO against the device's
request index (one line per device; I-Prof solid, MAUI dotted).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lab.contract import Result

__all__ = ["SETUP_NOTES", "deviation_stats", "dumps", "live_breakdown", "markdown", "plot"]

PROFILERS = ("iprof", "maui")
COLORS = {"iprof": "tab:blue", "maui": "tab:red"}


def _cost(record: dict[str, Any], kind: str) -> float:
    return float(record["time_ms"] if kind == "time" else record["energy"])


def deviation_stats(records: Sequence[dict[str, Any]], kind: str, slo: float, scale: float) -> dict[str, Any]:
    """Per profiler: tasks, p50/p90/p99 of |cost − SLO| (divided by ``scale``), p90 as a fraction of SLO."""
    out: dict[str, Any] = {}
    for name in PROFILERS:
        rows = [r for r in records if r["profiler"] == name]
        if not rows:
            continue
        dev = np.abs(np.array([_cost(r, kind) for r in rows]) - slo)
        cold = sum(r.get("source") == "cold" for r in rows)
        out[name] = {
            "tasks": len(rows),
            "p50": float(np.percentile(dev, 50)) / scale,
            "p90": float(np.percentile(dev, 90)) / scale,
            "p99": float(np.percentile(dev, 99)) / scale,
            "p90_fraction_of_slo": float(np.percentile(dev, 90)) / slo,
            "over_slo_share": float(np.mean([_cost(r, kind) > slo for r in rows])),
            "median_batch": float(np.median([r["batch_size"] for r in rows])),
            "cold_tasks": int(cold),
        }
    return out


def live_breakdown(records: Sequence[dict[str, Any]], kind: str, slo: float) -> dict[str, Any]:
    """Live diagnosis: each worker's first I-Prof task (the cold start) apart from the rest."""
    first = [r for r in records if r["profiler"] == "iprof" and r["request"] == 0]
    rest = [r for r in records if r["request"] >= 2]
    after = deviation_stats(rest, kind, slo, 1.0)
    return {
        "cold_start_errors_of_slo": [round((_cost(r, kind) - slo) / slo, 2) for r in first],
        "iprof_p90_fraction_after_first_round": after.get("iprof", {}).get("p90_fraction_of_slo"),
        "maui_p90_fraction_after_first_round": after.get("maui", {}).get("p90_fraction_of_slo"),
    }


def _panel_row(axes: Any, records: Sequence[dict[str, Any]], kind: str, slo: float, title: str) -> None:
    cdf, hist, err = axes
    for name in PROFILERS:
        rows = [r for r in records if r["profiler"] == name]
        if not rows:
            continue
        dev = np.sort(np.abs(np.array([_cost(r, kind) for r in rows]) - slo) / slo)
        cdf.step(dev, np.arange(1, len(dev) + 1) / len(dev), where="post", color=COLORS[name], label=name)
        sizes = np.array([r["batch_size"] for r in rows], dtype=float)
        bins = np.logspace(0, np.log10(max(2.0, sizes.max() * 1.1)), 30)
        hist.hist(sizes, bins=bins, alpha=0.5, color=COLORS[name], label=name)
        for device in sorted({r["device"] for r in rows}):
            mine = [r for r in rows if r["device"] == device]
            err.plot(
                [r["request"] for r in mine],
                [(_cost(r, kind) - slo) / slo for r in mine],
                color=COLORS[name],
                alpha=0.6 if name == "iprof" else 0.35,
                linestyle="-" if name == "iprof" else ":",
                linewidth=0.8,
            )
    cdf.axvline(0.25, color="grey", linestyle="--", linewidth=0.8)
    cdf.set(xscale="symlog", xlabel="|cost − SLO| / SLO", ylabel="CDF", title=f"{title}: deviation")
    cdf.legend()
    hist.set(xscale="log", xlabel="batch size L", ylabel="tasks", title=f"{title}: chosen batch sizes")
    hist.legend()
    err.axhline(0.0, color="black", linewidth=0.6)
    err.set(yscale="symlog", xlabel="request index (per device, per profiler)", ylabel="(cost − SLO) / SLO")
    err.set_title(f"{title}: error per device")


SETUP_NOTES = Path(__file__).with_name("profiler_setup.md").read_text().rstrip()  # what is real, emulated


def plot(result: Result) -> Any:
    """One figure row per mode (simulation, live): chosen batch sizes and each request's error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes, kind, name = result.view["modes"], result.view["kind"], result.view["name"]
    fig, axes = plt.subplots(len(modes), 3, figsize=(16, 4.6 * len(modes)), squeeze=False)
    for row, (mode, (records, slo)) in zip(axes, modes.items(), strict=True):
        _panel_row(row, records, kind, slo, mode)
    fig.suptitle(f"{name}: I-Prof vs MAUI (round-robin per device)")
    return fig


def markdown(result: Result, plan: Any) -> str:
    return str(result.view["table"])


def dumps(record: dict[str, Any]) -> str:
    """The summary pretty-printed on top, the raw series compact (they run to thousands of records)."""
    parts = [f'"summary": {json.dumps(record["summary"], indent=1, default=float)}']
    parts += [
        f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'), default=float)}"
        for k, v in record.items()
        if k != "summary"
    ]
    return "{\n" + ",\n".join(parts) + "\n}\n"
