"""How `python -m lab run robust` reads (lab/experiments/robust.py): the choice on the tuning seed, the
heatmap over the reported seeds, the recommended defence's curve over the attackers' share, a figure."""

from __future__ import annotations

from statistics import median
from typing import Any

from lab.contract import Result
from lab.experiments.robust_suite import CANDIDATES
from lab.render import figure


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return median(kept) if kept else None


def _pts(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def cell(judgements: list[dict[str, Any]], attack: str) -> dict[str, float | None]:
    """One defence × attack over the seeds: median accuracy gap to the clean undefended fleet, median share
    of honest pushes dropped."""
    return {
        "gap": _median([j["gaps"].get(attack) for j in judgements]),
        "dropped": _median([j["honest_dropped"].get(attack) for j in judgements]),
    }


def backdoors(judgements: list[dict[str, Any]]) -> str:
    """Each trigger's median attack success over the seeds, "corner / inset" (older results: the one)."""
    triggers = list(judgements[0].get("backdoor_by_trigger") or {})
    if not triggers:
        return _pct(_median([j["backdoor_success"] for j in judgements]))
    return " / ".join(_pct(_median([j["backdoor_by_trigger"][t] for j in judgements])) for t in triggers)


def triggers(by_defence: dict[str, list[dict[str, Any]]]) -> str:
    """The triggers the backdoor column lists, in its order (older results had the corner one only)."""
    first = next(iter(by_defence.values()))[0]
    return " / ".join(first.get("backdoor_by_trigger") or {}) or "the corner trigger"


def worst_drop(by_defence: dict[str, list[dict[str, Any]]], seeds: list[int]) -> str:
    """Each defence's worst single run for honest pushes at weight 0 (the medians above can hide one seed)."""
    each = []
    for defence, judgements in by_defence.items():
        runs = [(d, a, seed) for j, seed in zip(judgements, seeds, strict=True)
                for a, d in j["honest_dropped"].items() if d is not None]  # fmt: skip
        if runs and (worst := max(runs))[0] > 0:
            each.append(f"{defence} {_pct(worst[0])} ({worst[1]}, seed {worst[2]})")
    return "Worst single run, honest pushes at weight 0: " + "; ".join(each) + "." if each else ""


def shrunk(by_defence: dict[str, list[dict[str, Any]]]) -> str:
    """The weight label-check's ramp took off the honest pushes it kept (not counted as dropped), the worst
    attack's median over the seeds, per defence that ramps; "" when none does (or results before it)."""
    worst = {}
    for defence, judgements in by_defence.items():
        attacks = {a for j in judgements for a in j.get("honest_shrunk") or {}}
        medians = [_median([(j.get("honest_shrunk") or {}).get(a) for j in judgements]) for a in attacks]
        if medians:
            worst[defence] = max(m for m in medians if m is not None)
    if not worst:
        return ""
    each = "; ".join(f"{d}: at most {_pct(w)} of the honest pushes' weight" for d, w in worst.items())
    return (
        f"Weighed down by label-check's ramp, not dropped (median over the seeds, the worst attack): {each}."
    )


def bound(s: dict[str, Any], fleet: str, share: float, seeds: list[int]) -> str:
    """The clean fleet's lead over a perfect filter (the attackers' pushes lost on the way), median over
    ``seeds`` and each seed's, or "" when not measured (results before 2026-11-28)."""
    leads = (s.get("bound") or {}).get(fleet, {}).get(str(share), {})
    values = [leads[str(seed)] for seed in seeds if str(seed) in leads]
    if not values:
        return ""
    each = ", ".join(_pts(v) for v in values)
    return (
        f"A perfect filter (every attacker push lost on the way: the attackers' data and compute are gone, "
        f"nothing else) ends {_pts(median(values))} points below the clean fleet (each seed: {each}): the "
        "part of a gap no filter can win back."
    )


def tuning_seeds(s: dict[str, Any]) -> list[int]:
    """The seeds the choice was made on (results before 2026-11-30 chose on one, ``tune_seed``)."""
    return s.get("tune_seeds", [s["tune_seed"]])


def choice_tables(s: dict[str, Any], chooser: str) -> list[str]:
    """The choice, a table for each tuning seed, and with several the ranking's key for each defence."""
    by_seed = s.get("choice_seeds", {str(s["tune_seed"]): s["choice"]})
    lines: list[str] = []
    for seed, choice in by_seed.items():
        lines += [
            "",
            f"## The choice (seed {seed}, `{chooser}`)",
            "",
            "| defence | worst gap | cost (no attack) | backdoor success | targets missed |",
            "|---|---|---|---|---|",
        ]
        for defence, j in choice.items():
            cost = "—" if j["cost"] is None else f"{j['cost']:.2f}×"
            missed = ", ".join(j["misses"]) or "none"
            lines.append(f"| {defence} | {_pts(j['worst_gap'])} | {cost} | {backdoors([j])} | {missed} |")
        if line := bound(s, chooser, s["share"], [int(seed)]):
            lines += ["", line]
    if len(tuning_seeds(s)) > 1:
        lines += [
            "",
            "Ranked over the tuning seeds by the attacks lost on each (summed), the worst result on any, then"
            " the other targets missed on each (summed): "
            + "; ".join(f"{d} {tuple(v)}" for d, v in s["choice_standing"].items() if d != "none")
            + ".",
        ]
    return lines


def markdown(result: Result, plan: Any) -> str:
    s = result.summary
    name = "robust-quick" if s["quick"] else "robust"
    first = next(iter(s["fleets"]))
    chooser = s.get("choice_fleet", first)  # results before 2026-11-29 chose on the first fleet
    attacks = list(next(iter(s["choice"].values()))["gaps"])
    t = s["targets"]
    tuned = tuning_seeds(s)
    lines = [
        "# Byzantine robustness: the attacks crossed with the defences (issue 30)",
        "",
        (
            "`python -m lab run robust` (or `fleet experiment robust`)"
            if set(s["choice"]) | {"none"} >= set(CANDIDATES)
            else "`python -m lab.experiments.robust --rerun` (the last full choice's first two and the new"
            " candidates, with the undefended and Kardam; `python -m lab run robust` runs every candidate)"
        )
        + ": the default strategy inside each",
        f"defence, {round(100 * s['share'])}% of the devices Byzantine (omniscient, colluding:",
        "sim/adversary.py), in the simulator (real ONNX gradients, virtual seconds). A gap is the clean,",
        "undefended fleet's final accuracy minus the run's (mean of the last 5 evaluations), in points;",
        "dropped is the share of honest pushes given weight 0. Targets: gap ≤ "
        f"{100 * t['gap']:.0f} points, honest dropped ≤ {100 * t['honest_drop']:.0f}%, backdoor success ≤ "
        f"{100 * t['asr']:.0f}%, no-attack time to target ≤ {t['cost']}× the undefended.",
        "",
        f"**Recommended: {s['recommended']}** (chosen on seed{'s' if len(tuned) > 1 else ''} "
        f"{', '.join(map(str, tuned))} on `{chooser}`, reported on seeds {s['seeds']}).",
    ]
    lines += choice_tables(s, chooser)
    for fleet, by_defence in s["heatmap"].items():
        info = s["fleets"][fleet]
        lines += [
            "",
            f"## `{fleet}`: {info['devices']} devices, {info['model']}, "
            f"{round(s['fleet_shares'][fleet] * info['devices'])} Byzantine, median over seeds {s['seeds']}",
            "",
            "Gap in points (honest pushes dropped). Backdoor success: of each trigger, median over the seeds"
            f" ({triggers(by_defence)}).",
            "",
            "| defence | " + " | ".join(attacks) + " | backdoor success | cost |",
            "|---|" + "---|" * (len(attacks) + 2),
        ]
        for defence, judgements in by_defence.items():
            cells = [cell(judgements, a) for a in attacks]
            cost = _median([j["cost"] for j in judgements])
            lines.append(
                f"| {defence} | "
                + " | ".join(f"{_pts(c['gap'])} ({_pct(c['dropped'])})" for c in cells)
                + f" | {backdoors(judgements)} | {'—' if cost is None else f'{cost:.2f}×'} |"
            )
        if line := worst_drop(by_defence, s["seeds"]):
            lines += ["", line]
        if line := shrunk(by_defence):
            lines += ["", line]
        if line := bound(s, fleet, s["fleet_shares"][fleet], s["seeds"]):
            lines += ["", line]
    lines += [
        "",
        f"## Final accuracy against the attackers' share (`{first}`, median over seeds)",
        "",
        "| defence | share | " + " | ".join(attacks) + " |",
        "|---|---|" + "---|" * len(attacks),
    ]
    for defence, by_share in s["curve"].items():
        for share, by_attack in by_share.items():
            finals = [_median(by_attack[a]) for a in attacks]
            lines.append(
                f"| {defence} | {float(share):.0%} | "
                + " | ".join("—" if f is None else f"{f:.3f}" for f in finals)
                + " |"
            )
    leads = [
        (share, (s.get("bound") or {}).get(first, {}).get(share)) for share in next(iter(s["curve"].values()))
    ]
    if all(lead and all(str(seed) in lead for seed in s["seeds"]) for _, lead in leads):
        each = " / ".join(
            f"{_pts(median(lead[str(seed)] for seed in s['seeds']))} at {float(share):.0%}"
            for share, lead in leads
        )
        lines += [
            "",
            f"A perfect filter at each share, below the clean fleet (median over the seeds): {each}.",
        ]
    lines += ["", f"![gap to the clean fleet, defences × attacks]({name}.png)"]
    return "\n".join(lines)


def plot(result: Result) -> Any:
    import numpy as np

    s = result.summary
    fleets = list(s["heatmap"])
    fig, axes = figure(len(fleets), width=6.5, height=0.6 * len(s["reported"]) + 2.0)
    for ax, fleet in zip(axes, fleets, strict=True):
        by_defence = s["heatmap"][fleet]
        attacks = list(next(iter(by_defence.values()))[0]["gaps"])
        grid = np.array(
            [
                [np.nan if (g := cell(j, a)["gap"]) is None else 100 * g for a in attacks]
                for j in by_defence.values()
            ]
        )
        image = ax.imshow(grid, cmap="Reds", vmin=0, vmax=max(10.0, float(np.nanmax(grid, initial=0.0))))
        for (row, col), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(col, row, f"{value:.1f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(attacks)), attacks, rotation=45, ha="right")
        ax.set_yticks(range(len(by_defence)), list(by_defence))
        ax.set_title(f"{fleet}: points below the clean fleet")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig
