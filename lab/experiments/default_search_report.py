"""The default-search report: the figure and the markdown table, from the experiment's summary.

Kept apart from experiments/default_search.py, whose code is part of the cached runs' key: a change to
how results are drawn does not invalidate the runs.
"""

from __future__ import annotations

from typing import Any

from lab.experiments.default_search import RATE_FACTORS, WORKLOADS
from lab.render import figure, fmt


def plot(summary: dict[str, Any], curves: list[dict[str, Any]]) -> Any:
    fig, (ax_curve, ax_rate) = figure(2, width=6.0)
    for output in curves:
        run = output["run"]
        ax_curve.plot(output["times"], output["accuracy"], label=f"{run['candidate']} γ={run['lr']}")
    ax_curve.axhline(WORKLOADS["peer-20"].target, color="k", lw=0.5, ls=":")
    ax_curve.set(
        xlabel="virtual seconds",
        ylabel="test accuracy",
        ylim=(0, 1),
        title=f"peer-20, seed {summary['seeds'][0]}, each at its tuned rate",
    )
    ax_curve.legend(fontsize=7)
    curves_by_rate = summary["rate_curves"]
    reached = [
        pt["time"] if pt["time"] is not None else pt["end_time"]
        for points in curves_by_rate.values()
        for pt in points.values()
        if not pt["diverged"]
    ]
    top = 1.4 * max(reached)  # a diverged run is drawn here, above every time and every censored end
    for i, (cand, points) in enumerate(curves_by_rate.items()):
        factors = sorted(points, key=float)
        xs = [float(f) for f in factors]
        ys = [top if points[f]["diverged"] else points[f]["time"] or points[f]["end_time"] for f in factors]
        style = "-" if "(default" in cand else "--"
        line = ax_rate.plot(xs, ys, style, color=f"C{i % 10}", lw=2.5 if style == "-" else 1, label=cand)[0]
        for x, f, y in zip(xs, factors, ys, strict=True):
            missed = points[f]["time"] is None
            ax_rate.plot(
                x,
                y,
                "x" if points[f]["diverged"] else "o",
                color=line.get_color(),
                mfc="none" if missed else line.get_color(),
            )
    ax_rate.axhline(top, color="k", lw=0.5, ls=":")
    ax_rate.text(0.26, top * 1.03, "diverged", fontsize=7)
    ax_rate.set_xscale("log")
    ax_rate.set_xticks(RATE_FACTORS, [f"×{f:g}" for f in RATE_FACTORS])
    ax_rate.minorticks_off()
    ax_rate.set(
        xlabel="rate / the candidate's tuned rate (the default: its own rate)",
        ylabel="virtual s to 90% (open: missed by the cap)",
        title="forgiving a wrong rate (peer-20, seed 1)",
    )
    ax_rate.legend(fontsize=7)
    return fig


def markdown(summary: dict[str, Any], name: str) -> str:
    workloads = list(dict.fromkeys(w for row in summary["table"].values() for w in row if w != "lr"))
    lines = [
        "# Choosing the default strategy (issue 19)",
        "",
        "`python -m lab run default-search`: simulated always-online fleets with fixed speeds spread 7x, "
        "real ONNX gradients of the thesis CNN, batch 100. Rates tuned on data seed "
        f"{summary['tune_seed']}; reported seeds {', '.join(map(str, summary['seeds']))} (IID: the first "
        "only): median (range) of virtual seconds to the target, a miss counted at its end and marked "
        f"censored. Figure: [{name}.png]({name}.png).",
        "",
        "| candidate | γ | " + " | ".join(f"{w} (to {WORKLOADS[w].target:.0%})" for w in workloads) + " |",
        "| --- | --- | " + " | ".join("---" for _ in workloads) + " |",
    ]
    for cand, row in summary["table"].items():
        cells = [
            "-"
            if w not in row
            else fmt(row[w]["time"], 1) + (f", {row[w]['diverged']} diverged" if row[w]["diverged"] else "")
            for w in workloads
        ]
        lines.append(f"| {cand} | {row['lr']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Rate curves (peer-20): virtual seconds to 90% at a multiple of the tuned rate",
        "",
        "| candidate | " + " | ".join(f"×{f}" for f in RATE_FACTORS) + " |",
        "| --- | " + " | ".join("---" for _ in RATE_FACTORS) + " |",
    ]
    for cand, points in summary["rate_curves"].items():
        cells = []
        for f in RATE_FACTORS:
            pt = points.get(f) or points.get(str(f))
            if pt is None:
                cells.append("-")
            elif pt["diverged"]:
                cells.append("diverged")
            elif pt["time"] is None:
                cells.append(f"> {pt['end_time']:.0f}")
            else:
                cells.append(f"{pt['time']:.1f}")
        lines.append(f"| {cand} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
