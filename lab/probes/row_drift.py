"""Issue 30's drift probe: how does a defence's view of each device change over a long run?

Runs the robust experiment's simulator (``lab.experiments.robust.simulate``) once with a defence around the
default strategy and records, for every push, what label-check and FLTrust saw: label-check's lowest row
cosine and the device's standing, FLTrust's score and standing, the push's bias residual ½‖∂b‖₁ (how far its
mean prediction is from its labels) and whether it got weight 0. Prints one JSON line per window of
``--window`` pushes and device, Byzantine or not, with the means (docs/robustness-history.md, the eleventh
look: a few honest devices drift under the row test's threshold late in a run, and once dropped, further).

Not an experiment (no results file).
``python -m lab.probes.row_drift --fleet peer-mlp-long --attack backdoor-inset6``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

import numpy as np


def record(run: Any, window: int) -> list[dict[str, Any]]:
    """Each window × device's means over ``run`` (a ``lab.experiments.robust.Run``)."""
    import sim.adversary as adversary
    from lab.experiments.robust import simulate
    from server.strategies.label_check import LabelCheck
    from server.strategies.trusted_score import TrustedScore

    seen: dict[str, Any] = {}
    rows: list[list[Any]] = []  # window, device, Byzantine, what the wrappers saw, given weight 0
    check_receive, rows_score = LabelCheck.receive, LabelCheck.rows_score
    score, trusted, observe = TrustedScore.score, TrustedScore.trusted, adversary.Adversary.observe

    def check_receive_(self: LabelCheck, arrival: Any) -> float:
        head = None if self.reference is None else self.reference.head()
        if head is not None:
            seen["residual"] = 0.5 * float(np.abs(arrival.gradient[head[1]].astype(np.float64)).sum())
        weight = check_receive(self, arrival)  # the outermost wrapper: its weight is the push's
        seen["row_standing"] = self.standing.get(arrival.device_id)
        rows.append([len(rows) // window, arrival.device_id, False, dict(seen), weight == 0.0])
        seen.clear()
        return weight

    def rows_score_(self: LabelCheck, *args: Any) -> float | None:
        seen["row"] = rows_score(self, *args)
        return seen["row"]

    def score_(self: TrustedScore, gradient: np.ndarray, reference: np.ndarray) -> float:
        seen["fltrust"] = score(self, gradient, reference)
        return seen["fltrust"]

    def trusted_(self: TrustedScore, arrival: Any, *args: Any) -> Any:
        out = trusted(self, arrival, *args)
        seen["fltrust_standing"] = self.standing.get(arrival.device_id)
        return out

    def observe_(self: Any, byzantine: bool, gradient: np.ndarray, weight: float) -> None:
        rows[-1][2] = bool(byzantine)  # the push label-check has just weighed (no adversary: all honest)
        observe(self, byzantine, gradient, weight)

    patches = [(LabelCheck, "receive", check_receive_), (LabelCheck, "rows_score", rows_score_),
               (TrustedScore, "score", score_), (TrustedScore, "trusted", trusted_),
               (adversary.Adversary, "observe", observe_)]  # fmt: skip
    originals = [(cls, name, getattr(cls, name)) for cls, name, _ in patches]
    try:
        for cls, name, patched in patches:
            setattr(cls, name, patched)
        simulate(run)
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
    groups: dict[tuple[int, str], list[tuple[bool, dict[str, Any], bool]]] = defaultdict(list)
    for at, device, byzantine, values, dropped in rows:
        groups[at, device].append((byzantine, values, dropped))

    def mean(values: list[dict[str, Any]], key: str) -> float | None:
        kept = [v[key] for v in values if v.get(key) is not None]
        return round(float(np.mean(kept)), 3) if kept else None

    keys = ("row", "row_standing", "fltrust", "fltrust_standing", "residual")
    return [
        {"window": at, "device": device, "byzantine": pushes[0][0], "pushes": len(pushes),
         "dropped": sum(d for _, _, d in pushes), **{k: mean([v for _, v, _ in pushes], k) for k in keys}}
        for (at, device), pushes in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[1][0][0], kv[0][1]))
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defence", default="fltrust-parts-check-body-bound-rows")
    parser.add_argument("--attack", default="backdoor-inset6", help="an attack of the suite, or clean")
    parser.add_argument("--fleet", default="peer-mlp-long", help="a fleet of lab/experiments/robust.py's")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--share", type=float, default=0.3, help="of the devices, Byzantine")
    parser.add_argument("--window", type=int, default=3000, help="pushes a window")
    args = parser.parse_args()
    from lab.experiments.protocol import one_blas_thread
    from lab.experiments.robust import Run

    one_blas_thread()
    clean = args.attack == "clean"
    attack, share = (None, 0.0) if clean else (args.attack, args.share)
    run = Run(args.defence, attack, share, args.fleet, args.seed)
    for line in record(run, args.window):
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
