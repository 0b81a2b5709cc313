"""Issue 28's twenty-second probe: does a rate that grows late give small-batch CNN fleets both checks?

The twentieth search's two batch-32 CNN fleets ran together at every rate from 0.42 to 3.36 up to about 0.95
and parted after: the low rates flattened 0.5-1 point under where 3.36 went on climbing, while being as fast
or faster to the target. Across the ten batch-32 CNN fleets reported, the highest final came at 2.4-4.8 on
nine, the fastest run anywhere from 0.6 to 4.8. If the shipped rate early and a higher one late gave both,
the server would want a signal for "late"; this probe first asks whether the schedule itself would, reading
"late" from the run's own length, which a server in an online fleet does not know (an oracle, not a rule):

- ``off``: the shipped default;
- ``late-F-M``: the rate × M from arrival F × the run's gradients on (the step cap as shipped);
- ``ramp-F-M``: the rate × 1 → M linearly from arrival F × gradients to the run's end.

``python -m lab.probes.late_rate WORKLOAD ... --rules off,late-0.5-4 --seeds 2,3,4``; one JSON line a run,
judged against the search that reported the workload (``lab.probes.rule_jobs.report``)."""

from __future__ import annotations

from typing import Any

from lab.probes.rule_jobs import report, rule_jobs, run_default
from lab.probes.staleness_quantile import concurrency_scale, record_staleness
from server.strategies.base import Strategy


def multiplier(rule: str, arrivals: int, gradients: int) -> float:
    """What ``rule`` multiplies the rate by after ``arrivals`` of a run of ``gradients``."""
    kind, *values = rule.split("-")
    if kind == "off":
        return 1.0
    if kind not in ("late", "ramp") or len(values) != 2:
        raise ValueError(f"unknown rule {rule!r}: off, late-F-M or ramp-F-M")
    start, most = (float(v) for v in values)
    done = arrivals / gradients
    if done < start:
        return 1.0
    if kind == "late":
        return most
    return 1.0 + (most - 1.0) * min(1.0, (done - start) / max(1e-9, 1.0 - start))


def probe(job: tuple[str, str, int]) -> dict[str, Any]:
    from sim.workloads import workload

    name, rule, seed = job
    gradients = workload(name).gradients
    seen: list[int] = []  # one staleness an arrival: its length counts them

    def adapt(strategy: Strategy) -> Strategy:
        layer = concurrency_scale(strategy)
        plain = layer.factor
        layer.factor = lambda: plain() * multiplier(rule, len(seen), gradients)  # type: ignore[method-assign]
        record_staleness(layer, seen)
        return strategy

    return run_default(name, seed, adapt)


def main() -> None:
    args, jobs = rule_jobs(__doc__ or "", "off,late-0.5-4")
    report(probe, jobs, args.workers)


if __name__ == "__main__":
    main()
