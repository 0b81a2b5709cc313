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

from collections import deque
from functools import partial
from typing import Any

from lab.probes.rule_jobs import report, rule_jobs, run_default
from server.strategies.base import Strategy
from server.strategies.fairness import EqualShare


def shrunk_share(share: EqualShare, pseudo: float, device_id: str) -> float:
    """EqualShare.share with ``pseudo`` arrivals added to the device's count and to the mean count."""
    mean = len(share.recent) / max(1, len(share.counts))
    weight = (mean + pseudo) / (share.counts.get(device_id, 0) + pseudo)
    return min(share.cap, max(1.0 / share.cap, weight))


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    name, rule, seed = job
    kind, value = rule.split("-")

    def adapt(strategy: Strategy) -> Strategy:
        assert isinstance(strategy, EqualShare)  # the default is one (FedBuffEqual)
        if kind == "cap":
            strategy.cap = float(value)
        elif kind == "window":
            strategy.window, strategy.recent = int(value), deque(maxlen=int(value))
        else:
            strategy.share = partial(shrunk_share, strategy, float(value))  # type: ignore[method-assign]
        return strategy

    return run_default(name, seed, adapt)


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "cap-4,cap-2,cap-1")
    report(probe, jobs, args.workers)


if __name__ == "__main__":
    main()
