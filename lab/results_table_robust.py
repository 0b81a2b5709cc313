"""Results-table rows of Byzantine robustness (issue 30): the recommended defence against the suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.contract import Row
from lab.experiments.robust_report import _median, backdoors
from lab.render import results_link


def robust_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    chosen, t = s["recommended"], s["targets"]
    for fleet, by_defence in s["heatmap"].items():
        info = s["fleets"][fleet]
        byzantine = round(s["fleet_shares"][fleet] * info["devices"])
        for defence in dict.fromkeys(("none", chosen, "kardam")):
            judgements = by_defence.get(defence)
            if not judgements:
                continue
            attacks = list(judgements[0]["gaps"])
            gaps = {a: _median([j["gaps"][a] for j in judgements]) for a in attacks}
            worst = max(gaps, key=lambda a: gaps[a] if gaps[a] is not None else -1.0)
            dropped = _median([max((d for d in j["honest_dropped"].values() if d is not None), default=0.0)
                               for j in judgements])  # fmt: skip
            asr = _median([j["backdoor_success"] for j in judgements])
            cost = _median([j["cost"] for j in judgements])
            yield (
                f"{defence} ({'recommended' if defence == chosen else 'reference'}), "
                f"{info['devices']} devices ({info['model']}), {byzantine} Byzantine: worst accuracy gap to "
                "the clean fleet (its attack) / honest pushes dropped (worst attack) / backdoor success / "
                "no-attack time to target",
                f"{100 * (gaps[worst] or 0):.1f} points ({worst}) / {100 * (dropped or 0):.1f}% / "
                + ("—" if asr is None else f"{100 * asr:.1f}%")
                + " / "
                + ("—" if cost is None else f"{cost:.2f}x"),
                f"≤ {100 * t['gap']:.0f} / ≤ {100 * t['honest_drop']:.0f}% / ≤ {100 * t['asr']:.0f}% / "
                f"≤ {t['cost']}x",
                results_link("robust.md"),
            )


def backdoor_rows(data: dict[str, Any]) -> Iterator[Row]:
    """The backdoor rerun (docs/results/robust-backdoor.md): each defence's success of the corner trigger
    and of the inset one, and its worst accuracy gap, medians over the seeds."""
    s = data["summary"]
    for fleet, by_defence in s["heatmap"].items():
        for defence, judgements in by_defence.items():
            triggers = list(judgements[0].get("backdoor_by_trigger") or {})
            if defence == "none" or not triggers:
                continue
            worst = _median([j["worst_gap"] for j in judgements])
            yield (
                f"{defence}, {fleet}, backdoor success by trigger ({' / '.join(triggers)}) / worst gap",
                f"{backdoors(judgements)} / {100 * (worst or 0):.1f} points",
                f"≤ {100 * s['targets']['asr']:.0f}% each / ≤ {100 * s['targets']['gap']:.0f}",
                results_link("robust-backdoor.md"),
            )


def rerun_rows(name: str) -> Callable[[dict[str, Any]], Iterator[Row]]:
    """A rerun's rows (docs/results/NAME.md: the floor's, the veto's), as ``rows``."""
    return lambda data: rows(data, name)


def rows(data: dict[str, Any], name: str) -> Iterator[Row]:
    """Each reported defence's median gap under each attack over the seeds, the worst of them, and what a
    perfect filter loses on the same seeds (the bound)."""
    s = data["summary"]
    for fleet, by_defence in s["heatmap"].items():
        leads = s["bound"][fleet][str(s["fleet_shares"][fleet])]
        bound = _median([leads[str(seed)] for seed in s["seeds"] if str(seed) in leads])
        for defence, judgements in by_defence.items():
            if defence == "none":
                continue
            gaps = {a: _median([j["gaps"][a] for j in judgements]) for a in judgements[0]["gaps"]}
            over = sum(1 for g in gaps.values() if g is not None and g > s["targets"]["gap"])
            worst = max(gaps, key=lambda a: gaps[a] if gaps[a] is not None else -1.0)
            yield (
                f"{defence}, {fleet}: attacks past the gap target (median over seeds) / worst median gap "
                "(its attack) / a perfect filter's gap",
                f"{over} of {len(gaps)} / {100 * (gaps[worst] or 0):.1f} points ({worst}) / "
                f"{100 * (bound or 0):.1f} points",
                f"0 / ≤ {100 * s['targets']['gap']:.0f}",
                results_link(f"{name}.md"),
            )


ROBUST_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("robust", robust_rows),
    ("robust-backdoor", backdoor_rows),
    ("robust-floor", rerun_rows("robust-floor")),
    ("robust-veto", rerun_rows("robust-veto")),
)
