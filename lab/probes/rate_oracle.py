"""Issue 28: how far could a rule that sets the default's rate per workload go?

Each default search reports, on its held-back half, the shipped default at ×0.25 to ×4 of its rate
beside the tuned baselines. From the eleventh search on the default is one strategy (the eleventh's
choice; from the seventeenth, the CNN at 0.7x its rate), so its held-back halves (``HALVES``) read as one
table: for each constant multiplier, the workloads where it reaches the target within 1.1x of the best
tuned time and ends within 0.5 points of the best final; and for the best multiplier of each workload (an
oracle, which no rule knows in advance), how many a perfect per-workload rate would pass. The gap between
the two is what an adaptive rate has to close; what the oracle still misses, a rate cannot.

Reads the results files at the searches' commits; runs nothing. ``python -m lab.probes.rate_oracle
--figure docs/results/default-rate-oracle.png`` also draws the table: a workload a row, a multiplier a column.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lab.probes.adaptive_step import results_at

# the searches that reported the shipped default on a held-back half: the eleventh's default from the eleventh
# to the sixteenth, then the same with the CNN at 0.84 (0.7x), so a CNN's multipliers from "17" on are of
# 0.84; from "19" the concurrency scale reads the staleness's spread as well
HALVES = {
    "11": "8b230ac", "12": "b7b881f", "13": "bec1c0c", "14": "73bcf41", "15": "844d54f", "16": "0359ee2",
    "17": "60fd943", "18": "77f2491", "19": "ba05e1a", "20": "42f770c", "21": "58a6b90",
    "22": "3ea510f",
}  # fmt: skip
ELEVENTHS = tuple(HALVES[h] for h in ("11", "12", "13", "14", "15", "16"))  # the eleventh's default's halves
MULTIPLIERS = ("0.25", "0.5", "1.0", "2.0", "4.0")


def passes(point: dict[str, Any] | None, best_final: float) -> tuple[bool, bool]:
    """(within 1.1x of the best tuned time, final within 0.5 points of the best) for one rate's runs."""
    if point is None:
        return False, False
    fast = point["ratio"] is not None and point["ratio"] <= 1.1 + 1e-9
    return fast, point["final"] >= best_final - 0.005 - 1e-9


Row = tuple[str, list[tuple[bool, bool, str]]]  # a workload's label, and per multiplier (fast, high, text)


def draw(rows: list[Row], counts: dict[str, list[int]], path: Path) -> None:
    """The table as a figure: green where a multiplier passes both checks, amber one, grey neither."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {2: "#4caf50", 1: "#ffc107", 0: "#e0e0e0"}
    fig, ax = plt.subplots(figsize=(9, 0.24 * len(rows) + 1.8))
    for y, (_, cells) in enumerate(rows):
        for x, (fast, high, text) in enumerate(cells):
            ax.add_patch(plt.Rectangle((x, y), 1, 1, color=colours[fast + high], ec="white"))
            ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, len(MULTIPLIERS))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([x + 0.5 for x in range(len(MULTIPLIERS))])
    ax.set_xticklabels([f"×{m} ({counts[m][2]} pass)" for m in MULTIPLIERS], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks([y + 0.5 for y in range(len(rows))])
    ax.set_yticklabels([name for name, _ in rows], fontsize=6.5)
    ax.set_title(
        f"The shipped default at ×0.25-×4 of its rate on held-back halves {', '.join(HALVES)}\n"
        "each cell: time to the target over the best tuned run's, final accuracy (best final in brackets)\n"
        "green: within 1.1x and 0.5 points; amber: one of the two;"
        f" the best multiplier per workload passes {counts['oracle'][2]} of {len(rows)}",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--figure", type=Path, help="also draw the table here (a .png)")
    args = parser.parse_args()
    counts = {m: [0, 0, 0] for m in (*MULTIPLIERS, "oracle")}
    rows: list[Row] = []
    for half, commit in HALVES.items():
        for name, judged in results_at(commit)["summary"]["held_back"].items():
            best_final, oracle = judged["best_final"], [False, False, False]
            drawn: list[tuple[bool, bool, str]] = []
            for m in MULTIPLIERS:
                point = judged["rate_curve"].get(m)
                fast, high = passes(point, best_final)
                for i, ok in enumerate((fast, high, fast and high)):
                    counts[m][i] += ok
                    oracle[i] = oracle[i] or ok
                ratio = "miss" if point is None or point["ratio"] is None else f"{point['ratio']:.2f}x"
                drawn.append((fast, high, f"{ratio} {point['final']:.3f}" if point else "—"))
            for i, ok in enumerate(oracle):
                counts["oracle"][i] += ok
            rows.append((f"{half}: {name} ({best_final:.3f})", drawn))
            cells = [text + ("*" if fast and high else "") for fast, high, text in drawn]
            print(f"| {half} | {name} | {best_final:.3f} | " + " | ".join(cells) + " |")
    print()
    for m, (fast, high, both) in counts.items():
        label = "the best multiplier per workload" if m == "oracle" else f"×{m}"
        print(f"{label}: within 1.1x {fast}, within 0.5 points {high}, both {both}")
    if args.figure:
        draw(rows, counts, args.figure)


if __name__ == "__main__":
    main()
