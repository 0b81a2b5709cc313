"""Issue 30's label-flip probe: what lets label-flip past the recommended defence on some seeds?

On seed 1004 (a tuning seed, peer-mlp-long) label-flip ends at 0.774 inside the recommended defence, and on
fresh seeds 2002-2004 at 0.785-0.814, where on seed 1000 and the reported seeds 1-3 it ends within 1.6 points
of the clean fleet, with almost none of its pushes dropped either way (docs/robustness-history.md, the
fifteenth look). This runs the robust experiment's simulator with a defence and records, per push, what each
of its parts did: FLTrust's score (its device's standing) and the weight it gave (the gradient's norm out
over in), label-check's standing, the nearest-template test's standing and whether it dropped the push, and
how each claimed major row's descent (−∂W_c) ranks among the class templates (``margin``: its cosine with
c's template less the largest with another's, negative when the row looks more like another class;
``centred``: the same with the row's part along the classes' mean feature taken out). It reports, honest and
Byzantine apart, per quarter of the run: the mean FLTrust weight and score, the mean margin, the share of
pushes whose nearest template is not the claimed class, the nearest test's drops and lowest standings, the
fleet's settledness, and each device's mean margin, centred margin, score and share of pushes ranking its
claimed class first. With ``--label-cosines``, also each device's mean lowest cosine of its pushes with one
label's trusted gradient (over every label, the unclaimed, the claimed): what trusted-score's ``label_veto``
stands a device on (the sixteenth look).

Not an experiment (no results file): one JSON line per run.
``python -m lab.probes.label_flip --seeds 1000,1004 --attacks label-flip,clean``
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from server.strategies import by_label

DEFENCE = "fltrust-parts-check-body-bound-rows-ramp-templates-settling-q25"


LABEL_COSINES = False  # --label-cosines: each push's cosine with every label's trusted gradient
RECORDS: list[dict[str, Any]] = []  # this process's current run, one entry a push
CURRENT: dict[str, Any] = {}  # the push going through the defence
JOINED: dict[str, Any] = {}  # the run's devices in join order, and its adversary


def by_device(records: list[dict[str, Any]], key: str) -> dict[str, list[float]]:
    """``key``'s values in ``records``, by device."""
    out: dict[str, list[float]] = {}
    for r in records:
        if key in r:
            out.setdefault(r["device"], []).append(r[key])
    return out


def device_means(records: list[dict[str, Any]], key: str) -> list[float]:
    """Each device's mean of ``key`` over ``records``, lowest first."""
    return sorted(round(float(np.mean(m)), 2) for m in by_device(records, key).values() if m)


def mean_of(records: list[dict[str, Any]], key: str) -> float | None:
    """The mean of ``key`` over the records that have it."""
    values = [r[key] for r in records if r.get(key) is not None]
    return round(float(np.mean(values)), 3) if values else None


def mean_feature(check: Any) -> np.ndarray | None:
    """The unit mean of the classes' mean features at the templates' version (label-check's templates less
    it), computed once a refresh from the trusted digits (``class_means``)."""
    from server.strategies.label_check import class_means

    reference, at = check.reference, check.templates_at
    if reference is None or getattr(reference, "core", None) is None:
        return None
    cached = getattr(check, "_mean_feature", None)
    if cached is not None and cached[0] == at:
        return cached[1]
    params = reference.core.run.params
    means, counts = class_means(
        lambda x1, y1: reference.bench.gradients.loss_and_gradient(params, x1, y1)[1],
        reference.bench.train.x[reference.rows], reference.bench.train.y[reference.rows], reference.head(),
    )  # fmt: skip
    if not counts.any():
        return None
    mean = means[counts > 0].mean(axis=0)
    unit = mean / max(float(np.linalg.norm(mean)), 1e-30)
    check._mean_feature = (at, unit)
    return unit


def label_cosines(check: Any, arrival: Any) -> dict[str, float]:
    """The push's lowest cosine with one label's trusted gradient: over every label, over those it does not
    claim, over those it does (what trusted-score's ``label_veto`` stands a device on)."""
    if check.reference is None or arrival.label_counts is None:
        return {}
    version = arrival.base_version + arrival.staleness
    claimed = set(np.flatnonzero(np.asarray(arrival.label_counts) > 0).tolist())
    stack = check.by_label.stacked(check.reference, version, len(arrival.label_counts))
    scores = None if stack is None else by_label.label_cosines(arrival.gradient, stack)
    cosines = {} if scores is None else dict(zip(stack.labels.tolist(), scores.tolist(), strict=True))
    out = {"label_min": min(cosines.values())} if cosines else {}
    head = check.reference.head()
    if cosines and head is not None:  # the bias gradient there: the mass predicted on that label
        lowest = min(cosines, key=cosines.__getitem__)
        out["label_min_bias"] = float(arrival.gradient[head[1]][lowest])
        out["label_min_weighed"] = out["label_min"] * max(out["label_min_bias"], 0.0)
        out["label_min_claimed"] = float(lowest in claimed)
    for key, chosen in (("unclaimed_min", False), ("claimed_min", True)):
        values = [c for k, c in cosines.items() if (k in claimed) == chosen]
        if values:
            out[key] = min(values)
    return out


def install() -> None:
    """Wraps the defence's parts, once a process, to record what each did to a push in ``CURRENT``."""
    import lab.experiments.robust as robust
    from server.strategies.label_check import LabelCheck
    from server.strategies.trusted_score import TrustedScore

    if getattr(robust, "_label_flip_probe", False):
        return
    robust._label_flip_probe = True  # type: ignore[attr-defined]
    trusted, standing_of, receive = TrustedScore.trusted, LabelCheck.standing_of, LabelCheck.receive
    far_from_nearest = LabelCheck.far_from_nearest
    shrunk_pushes = robust.shrunk_pushes

    def trusted_recorded(self: Any, arrival: Any, reference: Any, whole: Any) -> Any:
        out = trusted(self, arrival, reference, whole)
        norm = float(np.linalg.norm(arrival.gradient))
        weight = 0.0 if out is None else float(np.linalg.norm(out.gradient)) / max(norm, 1e-30)
        CURRENT.update(score=self.last_score, weight=weight)
        return out

    def standing_recorded(self: Any, arrival: Any, weight: Any, freq: Any, head: Any, settled: float) -> Any:
        out = standing_of(self, arrival, weight, freq, head, settled)
        version = arrival.base_version + arrival.staleness  # the templates standing_of brought up to date
        if (margin := self.margin_score(version, weight, freq)) is not None:
            CURRENT["margin"] = margin
            common = mean_feature(self)  # the rows less their part along the classes' mean features
            if common is not None:
                rows = weight.reshape(len(freq), -1)
                centred = rows - np.outer(rows @ common, common)
                CURRENT["centred"] = self.margin_score(version, centred.ravel(), freq)
        CURRENT.update(standing=out, settledness=settled)
        return out

    def far_recorded(self: Any, arrival: Any, weight: Any, freq: Any, settledness: float) -> bool:
        out = far_from_nearest(self, arrival, weight, freq, settledness)
        if self.nearest is not None:
            CURRENT.update(nearest=self.margin_standing.get(arrival.device_id), nearest_dropped=out)
        return out

    def receive_recorded(self: Any, arrival: Any) -> float:
        CURRENT.clear()
        if LABEL_COSINES:
            CURRENT.update(label_cosines(self, arrival))
        out = receive(self, arrival)
        RECORDS.append({"device": arrival.device_id, "version": arrival.base_version, **CURRENT})
        return out

    def shrunk_recorded(strategy: Any, device_ids: list[str], attack: Any) -> dict[str, float]:
        JOINED.update(ids=device_ids, attack=attack)
        return shrunk_pushes(strategy, device_ids, attack)

    TrustedScore.trusted = trusted_recorded  # type: ignore[method-assign]
    LabelCheck.standing_of = standing_recorded  # type: ignore[method-assign]
    LabelCheck.receive = receive_recorded  # type: ignore[method-assign]
    LabelCheck.far_from_nearest = far_recorded  # type: ignore[method-assign]
    robust.shrunk_pushes = shrunk_recorded


def one(job: tuple[str, str, int, str, bool]) -> dict[str, Any]:
    import lab.experiments.robust as robust

    global LABEL_COSINES
    install()
    RECORDS.clear()
    defence, attack, seed, fleet, LABEL_COSINES = job
    records = RECORDS
    run = robust.Run(defence, None if attack == "clean" else attack, 0.3, fleet, seed)
    out = robust.simulate(run)
    adversary = JOINED["attack"]
    byzantine = {
        d for i, d in enumerate(JOINED["ids"]) if adversary is not None and adversary.is_byzantine(i)
    }
    last = max(r["version"] for r in records)
    summary: dict[str, Any] = {"defence": defence, "attack": attack, "seed": seed, "final": out["final"]}
    for group, flag in (("honest", False), ("byzantine", True)):
        if flag and not byzantine:
            continue
        for quarter in range(4):
            chosen = [r for r in records if (r["device"] in byzantine) == flag
                      and quarter * last / 4 <= r["version"] <= (quarter + 1) * last / 4]  # fmt: skip
            weights = [r.get("weight", 0.0) for r in chosen]  # dropped before FLTrust: weight 0
            margins = [r["margin"] for r in chosen if "margin" in r]
            scores = [r["score"] for r in chosen if r.get("score") is not None]
            standings = by_device(chosen, "nearest")
            summary[f"{group}_q{quarter + 1}"] = {
                "pushes": len(chosen),
                "nearest_dropped": round(float(np.mean([r.get("nearest_dropped", False) for r in chosen])), 3)
                if chosen
                else None,
                "settledness": mean_of(chosen, "settledness"),
                "lowest_nearest": sorted(round(min(v), 2) for v in standings.values() if v)[:4],
                "weight": round(float(np.mean(weights)), 3) if weights else None,
                "score": round(float(np.mean(scores)), 3) if scores else None,
                "margin": round(float(np.mean(margins)), 3) if margins else None,
                "not_nearest": round(float(np.mean(np.array(margins) < 0)), 3) if margins else None,
                "device_centred": device_means(chosen, "centred"),
                # each device's share of pushes ranking the claimed class's template first
                "device_nearest_share": sorted(
                    round(float(np.mean(np.array(m) > 0)), 3)
                    for m in by_device(chosen, "margin").values()
                    if m
                ),
                # each device's mean FLTrust score (its standing) over the quarter, lowest first
                "device_scores": device_means(chosen, "score"),
                "device_label_min": device_means(chosen, "label_min"),
                "device_unclaimed_min": device_means(chosen, "unclaimed_min"),
                "device_label_min_bias": device_means(chosen, "label_min_bias"),
                # the lowest cosine weighed by the predicted mass there (bias gradient, when positive)
                "device_label_min_weighed": device_means(chosen, "label_min_weighed"),
                "device_claimed_min": device_means(chosen, "claimed_min"),
                # each device's mean margin over the quarter, lowest first: what a standing would see
                "device_margins": device_means(chosen, "margin"),
            }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defences", default=DEFENCE)
    parser.add_argument("--attacks", default="label-flip,clean")
    parser.add_argument("--seeds", default="1000,1004")
    parser.add_argument("--fleet", default="peer-mlp-long")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--label-cosines", action="store_true", help="each push's lowest cosine with one label's g_s"
    )
    args = parser.parse_args()
    jobs = [(d, a, int(s), args.fleet, args.label_cosines) for s in args.seeds.split(",")
            for a in args.attacks.split(",") for d in args.defences.split(",")]  # fmt: skip
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for line in pool.map(one, jobs):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
