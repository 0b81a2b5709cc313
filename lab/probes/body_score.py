"""Issue 30's body probe: does scoring the layers under the output layer on their own stop ``alie-head``?

``python -m lab.probes.backdoor_rows --attack alie-head`` (seed 1000, no defence) found the attack's pushes
agreeing with the trusted gradient of their labels as a whole (median cosine 0.48, honest 0.51) and not
below the output layer (−0.24 against 0.45; a device's last 10: −0.25 against 0.40). This runs the robust
experiment's simulator (``lab.experiments.robust.simulate``) on peer-mlp with the recommended defence and
the same scoring each part (``parts`` "each"), clean and under attack, one JSON line per run.

Not an experiment (no results file).
``python -m lab.probes.body_score --seeds 1000 --attacks clean,alie-head``.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def one(job: tuple[str, str, int, str, float, int | None, str]) -> dict[str, Any]:
    import lab.experiments.robust as robust
    from lab.experiments.robust import Run, simulate
    from lab.experiments.robust_suite import DEFENCES

    defence, attack, seed, fleet, share, trusted, change = job
    if trusted is not None:  # the server's trusted digits: how many (the experiment's TRUSTED_SAMPLES)
        robust.TRUSTED_SAMPLES = trusted
    if change:  # the defence with some of its wrappers' settings changed, under a name of its own
        changes, changed = json.loads(change), f"{defence}+{change}"
        DEFENCES[changed] = tuple({**p, **changes.get(p["name"], {})} for p in DEFENCES[defence])
        defence = changed
    out = simulate(Run(defence, None if attack == "clean" else attack, share, fleet, seed))
    pushes = out["pushes"]
    honest, dropped = pushes.get("honest", 0), pushes.get("honest_dropped", 0)
    return {
        "defence": defence, "attack": attack, "seed": seed, "fleet": fleet, "trusted": trusted,
        "final": out["final"],
        "time_to_target": out["time_to_target"], "honest_dropped": round(dropped / max(honest, 1), 4),
        # label-check's ramp: the share of honest pushes weighed down, and of their weight taken off
        "honest_shrunk": round(pushes.get("honest_shrunk", 0) / max(honest, 1), 4),
        "honest_shrunk_removed": round(pushes.get("honest_shrunk_removed", 0.0) / max(honest, 1), 4),
        "byzantine_dropped": pushes.get("byzantine_dropped"), "byzantine": pushes.get("byzantine"),
        "backdoor_success": out["backdoor_success"],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defences", default="fltrust-labels-device,fltrust-labels-parts")
    parser.add_argument("--attacks", default="clean,alie-head,alie,sign-flip,ipm")
    parser.add_argument("--seeds", default="1000")
    parser.add_argument("--fleet", default="peer-mlp", help="a fleet of lab/experiments/robust.py's FLEETS")
    parser.add_argument("--share", type=float, default=0.3, help="of the devices, Byzantine")
    parser.add_argument(
        "--trusted", default="", help="trusted digits, comma-separated (default: the experiment's)"
    )
    parser.add_argument(
        "--change",
        action="append",
        default=[],
        help="a JSON change to each defence's wrappers, e.g. "
        '\'{"trusted-score": {"label_veto_memory": 25}}\' (repeat for more arms; none: each as it is)',
    )
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    jobs = [
        (d, a, int(s), args.fleet, args.share, int(t) if t else None, c)
        for c in args.change or [""]
        for t in args.trusted.split(",")
        for s in args.seeds.split(",")
        for a in args.attacks.split(",")
        for d in args.defences.split(",")
    ]
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for line in pool.map(one, jobs):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
