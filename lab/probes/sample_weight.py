"""Issue 28's ninth probe: do I-Prof's unequal batches want the buffer weighed by samples?

Judged across seeds (each seed's time against the configuration tuned on the other two), the eighth
search's held-back misses come down to two: I-Prof-sized batches (labels4-mlp-iprof) want half the MLP's
rate, a 100-device shuffled fleet twice it. Under I-Prof every device takes the same time a task, so a
slow device's gradient, from a third of the fast one's samples, weighs as much and is three times as
noisy. ``sample``: each gradient weighed by its batch over the mean batch of the last 200 arrivals (mean
weight 1: the rate is unchanged; with fixed batches nothing changes at all). ``sqrt``: by the square root
of that ratio. Rules wrap the sixth search's arm (``fedbuff-equal-ccap6``: the rate reference 10, no
served average, as lab/probes/noise_scale.py) at the eighth's rates (the MLP at 1.2) times ``factor``.

Not an experiment (no results file): one JSON line per run (final accuracy, time to a target set by the
probe's own runs on that workload: their best final less 1 point). Only workloads a search has reported
on. ``python -m lab.probes.sample_weight dirichlet0.5-mlp-iprof --rules default,sample --seeds 1,2``.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from server.strategies.base import Strategy
from server.strategies.fairness import SampleWeight

ARM = "fedbuff-equal-ccap6"  # the sixth's default (no served average), with each model's rate and cap
PLAIN: dict[str, Any] = {}  # the search's own ``build``, before this worker first replaced it


def probe(job: tuple[str, str, float, int]) -> dict[str, Any]:
    import lab.experiments.default_search as search
    from sim.workloads import workload

    name, rule, factor, seed = job
    model = workload(name).model
    plain = PLAIN.setdefault("build", search.build)
    power = {"default": None, "sample": 1.0, "sqrt": 0.5}[rule]

    def build(arm: str, lr: float) -> Strategy:
        built = plain(arm, lr)
        return built if power is None else SampleWeight(built, power=power)

    search.build = build  # type: ignore[assignment]  # this worker process only
    arm = search.arm_for(ARM, search.DOUBLED, model)  # the eighth's rates
    return search.simulate(search.Run(arm, search.rate_for(search.DOUBLED, model) * factor, name, seed=seed))


def main() -> None:
    from lab.experiments.default_search import judge
    from sim.workload_halves import SEEN

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--rules", default="default,sample,sqrt")
    parser.add_argument("--factors", default="1")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if unknown := [w for w in args.workloads if w not in set(SEEN)]:
        parser.error(f"not a workload a search has reported on: {unknown}")
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = [(r, float(f)) for r in args.rules.split(",") for f in args.factors.split(",")]
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for name in args.workloads:
            jobs = [(name, r, f, s) for r, f in configs for s in seeds]
            outputs = dict(zip(jobs, pool.map(probe, jobs), strict=True))
            judged = judge({cfg: [outputs[(name, *cfg, s)] for s in seeds] for cfg in configs})
            for (rule, factor), run in zip(configs, judged["runs"].values(), strict=True):
                line = {"workload": name, "rule": rule, "factor": factor, "target": judged["target"], **run}
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
