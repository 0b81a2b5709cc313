"""Issue 28's seventeenth probe: how far should equal shares go?

On the fourteenth held-back half plain FedBuff at 0.4 reached labels4-logreg-100dev-batch32-30x's target
1.6-1.8x sooner than the default (seeds 2-4 and fresh seeds 6-8 alike). Taking the default apart there on
seeds 6-8 (its time to 0.884: 5.9 / 5.9 / 6.9 s), only dropping its equal shares closed the gap (3.2 / 3.2 /
3.8 s, FedBuff's own 3.2 s): without warm-up 6.4 / 4.3 / 4.3, without the clip 5.9 / 4.3 / 6.9, without the
concurrency scale (at a quarter of the rate) 4.8 / 6.9 / 5.3. With 100 devices at a 30x speed spread most
devices arrive once or twice in the share's window of 200 arrivals, so a weight (the mean count over the
device's own) swings with one arrival more or less: the buffer's noise rises. Equal shares
were the first search's fix for the old default's plateau when the slowest devices held their own digits.
Rules, each the shipped default at the model's rate with the share's bound:

* ``cap-C``: each weight bounded to [1/C, C] (the default: 4; 1: no equal shares);
* ``window-W``: each device's arrivals counted over the last W instead of 200 (at 100 devices a window of
  200 sees most of them once or twice, so their weights are read from one or two arrivals);
* ``shrink-K``: K pseudo-arrivals added to every device's count and to the mean, (m + K)/(n + K) for m / n,
  so a weight read from few arrivals stays near 1 and one read from many is as before.

Judged against the search that reported each workload (its target and best tuned time). Not an experiment
(no results file): one JSON line per run. ``python -m lab.probes.share_cap adjacent-mlp --rules
cap-4,cap-2,cap-1 --seeds 2``.
"""

from __future__ import annotations

import json
from collections import deque
from functools import partial
from typing import Any

from lab.probes.adaptive_step import against_search
from lab.probes.agreement_rate import searched_runs
from lab.probes.rule_jobs import each_run, rule_jobs
from server.strategies.base import Strategy
from server.strategies.fairness import EqualShare

PLAIN: dict[str, Any] = {}  # the search's own ``build``, before this process first replaced it


def shrunk_share(share: EqualShare, pseudo: float, device_id: str) -> float:
    """EqualShare.share with ``pseudo`` arrivals added to the device's count and to the mean count."""
    mean = len(share.recent) / max(1, len(share.counts))
    weight = (mean + pseudo) / (share.counts.get(device_id, 0) + pseudo)
    return min(share.cap, max(1.0 / share.cap, weight))


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    import lab.experiments.default_search as search
    from sim.workloads import workload

    name, rule, seed = job
    arm, rates = search.CANDIDATES[3]  # the shipped default: the eleventh's choice
    model = workload(name).model
    plain = PLAIN.setdefault("build", search.build)  # the first job's: a worker process runs several
    kind, value = rule.split("-")

    def build(arm: str, lr: float) -> Strategy:
        strategy = plain(arm, lr)
        assert isinstance(strategy, EqualShare)  # the default is one (FedBuffEqual)
        if kind == "cap":
            strategy.cap = float(value)
        elif kind == "window":
            strategy.window, strategy.recent = int(value), deque(maxlen=int(value))
        else:
            strategy.share = partial(shrunk_share, strategy, float(value))  # type: ignore[method-assign]
        return strategy

    search.build = build  # type: ignore[assignment]  # this worker process only
    run = search.Run(search.arm_for(arm, rates, model), search.rate_for(rates, model), name, seed)
    return search.simulate(run)


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "cap-4,cap-2,cap-1")
    runs = searched_runs()
    for (name, rule, seed), output in each_run(probe, jobs, args.workers):
        print(json.dumps({
            "workload": name, "rule": rule, "seed": seed, "final": output["final"],
            **against_search(runs, name, output), "diverged": output["diverged"],
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
