"""Issue 28's eighteenth probe: equal shares read from each device's interval between arrivals.

The seventeenth (lab/probes/share_cap.py) found the shares' weights right on 20 devices and noise on 100:
they count each device's arrivals over the last 200, and at 100 devices most are seen once or twice there,
so a weight swings with one arrival more or less. Discounting a rarely seen device (``shrink-K``) cost the
20-device fleets whose slowest devices hold their own digits their targets: their slowest arrive once or
twice in the window too. A device's share can be read from its speed instead: the time since its last
arrival, which the coordinator sees, is its participation interval (FedAU, Wang and Ji 2023, weighs by
an estimate of it), known from its second arrival. Rules, each the shipped default at the model's rate:

* ``interval-C``: a device's weight is its last interval over the mean interval of the last 200 arrivals
  (each arrival counted with its own device's), bounded to [1/C, C]; 1 on a device's first arrival. At
  a fixed arrival rate r_i per device the mean over arrivals is n / Σr, so the weight is (Σr / n) / r_i,
  what counting converges to;
* ``ema-C``: the same with each device's interval a moving average (½ the last, ½ the average before);
* ``interval-auto``: bounded by the window over the devices in it (within [1, 4]), the largest weight
  counting can give: at 20 devices 4, at 100 about 2, at 1,000 about 1 (no shares, as counting today);
* ``cap-4``: the shipped default, for a side-by-side run.

Judged against the search that reported each workload (its target and best tuned time). Not an experiment
(no results file): one JSON line per run. ``python -m lab.probes.share_interval adjacent-mlp-30x
--rules interval-4,cap-4 --seeds 2``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from lab.probes.rule_jobs import report, rule_jobs, run_default
from server.strategies.base import Arrival, Strategy
from server.strategies.fairness import EqualShare


class IntervalShare:
    """Each device's weight from its interval between arrivals over the mean of the last ``window``."""

    def __init__(self, *, cap: float | None, smoothing: float, window: int = 200) -> None:
        self.cap, self.smoothing = cap, smoothing  # smoothing: the old average's share (0: the last)
        self.last: dict[str, float] = {}
        self.interval: dict[str, float] = {}
        self.recent: deque[float] = deque(maxlen=window)
        self.devices: deque[str] = deque(maxlen=window)  # who arrived last: the bound when cap is None

    def bound(self) -> float:
        """``cap``, or the most counting could give: the window over the devices in it, within [1, 4]."""
        if self.cap is not None:
            return self.cap
        return min(4.0, max(1.0, len(self.devices) / max(1, len(set(self.devices)))))

    def weight(self, arrival: Arrival) -> float:
        device, now = arrival.device_id, arrival.received_at
        if device in self.last:
            gap = now - self.last[device]
            old = self.interval.get(device, gap)
            self.interval[device] = self.smoothing * old + (1 - self.smoothing) * gap
        self.last[device] = now
        self.devices.append(device)
        if device not in self.interval:
            return 1.0
        self.recent.append(self.interval[device])
        mean, cap = sum(self.recent) / len(self.recent), self.bound()
        return min(cap, max(1.0 / cap, self.interval[device] / max(mean, 1e-12)))


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    name, rule, seed = job
    kind, value = rule.split("-")

    def adapt(strategy: Strategy) -> Strategy:
        assert isinstance(strategy, EqualShare)  # the default is one (FedBuffEqual)
        if kind == "cap":
            strategy.cap = float(value)
            return strategy
        cap = None if value == "auto" else float(value)
        shares = IntervalShare(cap=cap, smoothing=0.5 if kind == "ema" else 0.0)

        def receive(arrival: Arrival) -> float:
            return strategy.receive_scaled(arrival, shares.weight(arrival))

        strategy.receive = receive  # type: ignore[method-assign]
        return strategy

    return run_default(name, seed, adapt)


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "interval-4,cap-4")
    report(probe, jobs, args.workers)


if __name__ == "__main__":
    main()
