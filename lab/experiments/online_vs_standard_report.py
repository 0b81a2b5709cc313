"""How `python -m lab run online-vs-standard` reads (lab/experiments/online_vs_standard.py): the arms'
day-averaged metric per stream, the online / standard ratio and the gaps to the oracle against the
issue's targets, the energy per device per day, and a figure like the thesis's Fig. 3.6."""

from __future__ import annotations

from typing import Any

from lab.contract import Result
from lab.render import figure

LABELS = {
    "online": "Fleet online (default strategy)",
    "standard": "Standard FL, daily",
    "standard-frequent": "Standard FL, frequent rounds",
    "popular": "most popular (last hour)",
    "oracle": "oracle (hourly, all data)",
}


def _v(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def markdown(result: Result, plan: Any) -> str:
    s = result.summary
    setup, t = s["setup"], s["targets"]
    name = "online-vs-standard-quick" if s["quick"] else "online-vs-standard"
    lines = [
        "# Online FL against Standard FL on data that changes by the hour (issue 31)",
        "",
        "`python -m lab run online-vs-standard` (or `fleet experiment online-vs-standard`). The thesis",
        "(ch. 3, Fig. 3.6) reports that online FL boosts hashtag recommendations **2.3x** (F1@top-5) over",
        f"Standard FL on the same number of gradients. Here: {setup['devices']} simulated phones",
        f"(sim/diurnal.py's day), {setup['days']} scored days after {setup['warmup_days']} warm-up day(s),",
        f"seeds {s['seeds']} (each seed draws the stream, the day and the fleet).",
        "",
        "- **Fleet online**: the default strategy through the real coordinator core (sim/online.py), one",
        f"  task per app session of a fixed {setup['batch']} examples from the device's window (last",
        f"  {setup['window_h']:g} h, at most {setup['window_size']}), only while the app is in use.",
        f"- **Standard FL, daily**: synchronous FedAvg at {setup['round_hour']:g}:00 over the devices idle,",
        "  charging and on an unmetered network then, local SGD on each one's last "
        f"{setup['standard_window_h']:g} h;",
        f"  **frequent**: the same every {setup['frequent_every_h']:g} h over whoever is eligible.",
        "- **Most popular**: the previous hour's most frequent labels; **oracle**: hourly centralised SGD",
        "  on every device's recent data.",
        "",
        "Same budget: the unit is one example's gradient; every learning arm spends what online spent",
        "(the standard arms evenly over their rounds, carried over when a round cannot spend it, local",
        f"steps capped at {setup['max_local_steps']}; the oracle hour by hour as online did). Scored",
        "prequentially: each hour's data with the model in force at its start, then training; a day's",
        "metric pools its queries.",
        "",
        "| stream | metric | "
        + " | ".join(LABELS[a] for a in LABELS)
        + " | online / standard | target | met |",
        "|---|---|" + "---|" * (len(LABELS) + 3),
    ]
    for stream, row in s["streams"].items():
        m = row["mean"]
        if row["metric"] == "f1@5":
            target = f"≥ {t['ratio']}x"
        else:
            g = row["gap_to_oracle"]
            target = (f"online > standard; gap to oracle {_v(g['online'])} ≤ {t['gap_share']} × "
                      f"{_v(g['standard'])}")  # fmt: skip
        ratio = row["ratio_online_standard"]
        lo, hi = min(ratio["per_seed"]), max(ratio["per_seed"])
        met = "yes" if row["target_met"] else "**no**"
        lines.append(
            f"| {stream} | {row['metric']} | "
            + " | ".join(_v(m[a]) for a in LABELS)
            + f" | **{ratio['mean']:.2f}x** ({lo:.2f}-{hi:.2f}) | {target} | {met} |"
        )
    lines += [
        "",
        "Means over the scored days and the seeds; the ratio is the mean of the seeds' ratios (their",
        "range in brackets).",
        "",
        "## Budgets, rounds and the online fleet",
        "",
        "| stream | examples' gradients: online / standard / frequent / oracle | devices per daily round | "
        "frequent rounds nobody could join | local steps (daily, frequent) | online tasks per device-day | "
        "mean staleness (max) | wall s per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stream, row in s["streams"].items():
        ex, p, o = row["examples"], row["participants"], row["online"]
        spend = " / ".join(
            str(round(sum(ex[a]) / len(ex[a]))) for a in ("online", "standard", "standard-frequent", "oracle")
        )
        lines.append(
            f"| {stream} | {spend} | {p['standard_eligible']:.1f} | "
            f"{100 * p['standard-frequent_skipped']:.0f}% | "
            f"{p['standard_steps']:.1f}, {p['standard-frequent_steps']:.1f} | "
            f"{o['tasks_per_device_day']:.1f} | "
            f"{o['staleness_mean']:.2f} ({o['staleness_max']:.0f}) | {row['wall_s']:.0f} |"
        )
    lines += [
        "",
        "## Energy per device per day (online)",
        "",
        "The client's energy model (client/_energy.py: 2.5 W over an 11.55 Wh battery, about 0.0060% per",
        "CPU second) times the compute time the simulator charges each task (its examples × the model's",
        "FLOPs per example over the phone's GFLOP/s, sim/population.py's classes). The models here are",
        "tiny, so the same tasks are also costed as if each example cost the thesis CNN's 4e8 FLOPs.",
        f"Thesis: {t['thesis_energy']}% per day. Standard FL computes on the charger (no drain).",
        "",
        "| stream | model FLOPs / example | mean % / day | max % / day | at the CNN's cost: mean | max |",
        "|---|---|---|---|---|---|",
    ]
    for stream, row in s["streams"].items():
        e = row["energy"]
        lines.append(
            f"| {stream} | {e['flops_per_example']:.3g} | {e['mean']:.2e} | {e['max']:.2e} | "
            f"{e['mean_at_cnn_cost']:.4f} | {e['max_at_cnn_cost']:.4f} |"
        )
    lines += ["", "## Per day (mean over seeds)", ""]
    for stream, row in s["streams"].items():
        n = len(next(iter(row["days"].values())))
        header = "| arm | " + " | ".join(f"day {d}" for d in range(n)) + " |"
        lines += [
            f"**{stream}** ({row['metric']}; the warm-up days come first)",
            "",
            header,
            "|---|" + "---|" * n,
        ]
        lines += [f"| {a} | " + " | ".join(_v(v) for v in row["days"][a]) + " |" for a in LABELS]
        lines.append("")
    lines += [f"![the metric over simulated days]({name}.png)"]
    return "\n".join(lines)


def plot(result: Result) -> Any:
    import numpy as np

    s = result.summary
    streams = list(s["streams"])
    fig, axes = figure(len(streams), width=5.0, height=3.6)
    warm = 24 * s["setup"]["warmup_days"]
    for ax, stream in zip(axes, streams, strict=True):
        row = s["streams"][stream]
        for arm, label in LABELS.items():
            hourly = np.array([np.nan if v is None else v for v in row["hourly"][arm]], dtype=float)
            hours = np.arange(hourly.size) / 24.0
            kernel = np.ones(6) / 6  # a 6-hour moving average of the hourly metric (night hours are noisy)
            valid = np.isfinite(hourly)
            filled = np.where(valid, hourly, 0.0)
            smooth = np.convolve(filled, kernel, "same") / np.maximum(
                np.convolve(valid, kernel, "same"), 1e-9
            )
            ax.plot(hours, smooth, label=label, lw=1.6 if arm == "online" else 1.0)
        ax.axvspan(0, warm / 24.0, color="0.9", label="warm-up (not scored)" if warm else None)
        ax.set_xlabel("simulated day")
        ax.set_ylabel(row["metric"])
        ax.set_title(f"{stream}: {row['ratio_online_standard']['mean']:.2f}x online / standard")
    axes[0].legend(fontsize=7)
    return fig
