"""Issue 30: how the robust experiment judges a defence (lab/experiments/robust.py): its gaps, honest drops,
backdoor success and cost against the issue's targets on one seed (``judge``), and its rank in the choice
(``standing``, summed over the tuning seeds by ``overall``)."""

from __future__ import annotations

import math
from typing import Any

from lab.experiments.robust_suite import BACKDOORS

TARGET_GAP, TARGET_HONEST_DROP, TARGET_ASR, TARGET_COST = 0.02, 0.10, 0.10, 1.2
# the choice's allowance over a perfect filter: about one run's noise in a final (the mean of 5 evaluations)
NOISE = 0.005


def judge(
    runs: dict[str, dict[str, Any]], clean: dict[str, Any], baseline_time: float | None
) -> dict[str, Any]:
    """One defence on one seed and fleet: its gap to the undefended clean fleet under each attack, the honest
    pushes it dropped, the backdoor's success, its cost with no attack, and which targets it misses."""
    reference = clean["final"]
    gaps = {a: round(reference - r["final"], 4) for a, r in runs.items() if a != "clean"}
    dropped = {
        a: r["pushes"]["honest_dropped"] / r["pushes"]["honest"] if r["pushes"]["honest"] else None
        for a, r in runs.items()
    }
    # label-check's ramp: the weight it took off the honest pushes it kept, as a share (older runs: none)
    shrunk = {
        a: r["pushes"]["honest_shrunk_removed"] / r["pushes"]["honest"]
        for a, r in runs.items()
        if "honest_shrunk_removed" in r["pushes"] and r["pushes"]["honest"]
    }
    own = runs.get("clean")
    cost = None
    if own is not None and baseline_time:
        cost = own["time_to_target"] / baseline_time if own["time_to_target"] is not None else math.inf
    by_trigger = {a: runs[a]["backdoor_success"] for a in BACKDOORS if a in runs}
    asr = max(by_trigger.values(), default=None)  # the worst trigger's
    misses = [a for a, g in gaps.items() if g > TARGET_GAP]
    # an honest push weighed down is partly dropped: the target counts the weight lost (since 2026-11-29)
    lost = {a: d + shrunk.get(a, 0.0) for a, d in dropped.items() if d is not None}
    misses += [f"drop:{a}" for a, d in lost.items() if d > TARGET_HONEST_DROP]
    misses += ["backdoor-success"] if asr is not None and asr > TARGET_ASR else []
    misses += ["cost"] if cost is not None and cost > TARGET_COST else []
    return {
        "gaps": gaps,
        "worst_gap": max(gaps.values(), default=0.0),
        "honest_dropped": dropped,
        "honest_shrunk": shrunk,
        "backdoor_success": asr,
        "backdoor_by_trigger": by_trigger,
        "cost": cost,
        "misses": misses,
    }


def standing(judged: dict[str, Any], bound: float = 0.0) -> tuple[int, float, int]:
    """A defence's rank on the tuning seed: the attacks it loses first (more than the gap target below the
    clean fleet and more than ``NOISE`` below a perfect filter, which is ``bound`` below it: a defence is not
    charged for the attackers' own data and compute, which no filter wins back (at peer-mlp's 3,000 pushes
    that is 2.1 points on seed 1000, and the 2-point target would rank defences by noise around it); or for
    a backdoor, its success past the target: each trigger an attack of its own), then
    its worst result against that result's target (a gap over 2 points, a trigger's success over 10%: a
    backdoor at 77% is a worse loss than a gap of 2.2 points), then the other targets it misses, each
    counted once (honest drops, cost)."""
    by_trigger = judged.get("backdoor_by_trigger") or {}
    lost = {a for a, gap in judged["gaps"].items() if gap > max(TARGET_GAP, bound + NOISE)}
    lost |= {a for a, success in by_trigger.items() if success is not None and success > TARGET_ASR}
    worst = max(
        [gap / TARGET_GAP for gap in judged["gaps"].values()]
        + [success / TARGET_ASR for success in by_trigger.values() if success is not None],
        default=0.0,
    )
    counted = {*judged["gaps"], "backdoor-success"}
    others = {m.split(":")[0] for m in judged["misses"] if m not in counted}
    return len(lost), round(worst, 6), len(others)


def overall(standings: list[tuple[int, float, int]]) -> tuple[int, float, int]:
    """A defence's standing over several tuning seeds: the attacks it loses on each, summed; its worst
    result on any; the other targets it misses on each, summed."""
    return (
        sum(s[0] for s in standings),
        max((s[1] for s in standings), default=0.0),
        sum(s[2] for s in standings),
    )
