"""What the drift demo's phones could know (issue 31): per simulated hour, on the demo's own stream
(fleet/demo_drift_feed.py, seed 0), the F1@5 on the held-out users' next hour of

* ``central``: a softmax (scikit-learn's LogisticRegression) fitted on all the phones' windows at once,
  at that hour: a centrally retrained model, the most the phones' data can teach a linear model;
* ``popular``: the items the phones used most in the last hour;
* ``frozen``: ``central`` as fitted at ``--freeze`` (the first evening) and never again.

Not an experiment (no plan, no results file): ``python -m lab.probes.drift_ceiling --devices 20``.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np


def main() -> None:
    from sklearn.linear_model import LogisticRegression

    from fleet.demo_drift_feed import DriftFeed, to_unit_range
    from sim.diurnal import HOUR
    from sim.streams.metrics import f1_at_k

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--hours", type=int, default=45)
    parser.add_argument("--freeze", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # lbfgs's convergence notes on a few hundred rows
    feed = DriftFeed(Path(tempfile.mkdtemp()), args.devices, args.hours, seed=args.seed)
    slots = feed.stream.params.n_slots

    def scores(model: LogisticRegression, x: np.ndarray) -> np.ndarray:
        out = np.full((len(x), slots), -np.inf)
        out[:, model.classes_] = model.predict_log_proba(x)
        return out

    frozen = None
    print("hour  window  central  popular  frozen")
    for hour in range(args.hours):
        now = feed.sim_time(hour)
        parts = [feed.windows.window(d, now) for d in range(args.devices)]
        x = np.concatenate([to_unit_range(p[1]) for p in parts if len(p[2])] or [np.empty((0, 1))])
        y = np.concatenate([p[2] for p in parts if len(p[2])] or [np.empty(0, dtype=int)])
        nxt = feed.held_out.between(now, now + HOUR)
        if len(y) < 2 or len(set(y)) < 2 or len(nxt) < 30:
            continue
        test = to_unit_range(nxt.features)
        model = LogisticRegression(max_iter=300).fit(x, y)
        frozen = model if hour == args.freeze else frozen
        last = feed.windows.between(now - HOUR, now)[2]
        popular = np.tile(np.bincount(last, minlength=slots).astype(float), (len(test), 1))
        row = [f1_at_k(scores(model, test), nxt.item), f1_at_k(popular, nxt.item)]
        row.append(f1_at_k(scores(frozen, test), nxt.item) if frozen is not None else float("nan"))
        print(f"{hour:4d}  {len(y):6d}  " + "  ".join(f"{v:7.3f}" for v in row))


if __name__ == "__main__":
    main()
