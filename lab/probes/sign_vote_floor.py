"""Issue 30: does a support floor let the sign vote see the inset backdoor? (docs/robustness-history.md)

The support vote (server/strategies/sign_vote.py) stops the corner trigger, whose weights no honest device
moves; the inset trigger's weights are moved a little by the 12% of clean digits with ink there. With a
floor, a device supports a parameter only where it moves it by more than floor × its mean |g|. Each run is
`fleet experiment robust`'s simulation (peer-mlp, 6 of 20 attacking, inside FLTrust by device labels) on the
tuning seed 1000. Not an experiment (no results file): one line per run.

    python -m lab.probes.sign_vote_floor [FLOOR ...]
"""

from __future__ import annotations

import sys
from multiprocessing import Pool
from typing import Any

from lab.experiments import robust
from server.strategies import RECOMMENDED_DEFENCE

SEED = 1000
ATTACKS = (None, "backdoor-inset")


def variant(floor: float) -> str:
    return f"support-floor{floor}"


def one(job: tuple[float, str | None]) -> dict[str, Any]:
    floor, attack = job
    robust.DEFENCES[variant(floor)] = ({"name": "sign-vote", "floor": floor}, *RECOMMENDED_DEFENCE)
    out = robust.simulate(robust.Run(variant(floor), attack, 0.3 if attack else 0.0, "peer-mlp", SEED))
    asr = out["backdoor_success"]
    return {"floor": floor, "attack": attack or "clean", "final": out["final"], "asr": asr}


def main(floors: list[float]) -> None:
    with Pool(2) as pool:
        for row in pool.imap(one, [(floor, attack) for floor in floors for attack in ATTACKS]):
            asr = "" if row["asr"] is None else f", backdoor success {row['asr']:.3f}"
            print(f"floor {row['floor']}: {row['attack']}: final {row['final']:.4f}{asr}", flush=True)


if __name__ == "__main__":
    main([float(f) for f in sys.argv[1:]] or [0.5, 1.0])
