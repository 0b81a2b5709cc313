"""Issue 30's template probe: can label-check's row test hold a row to a class's features, not to g_s?

The row test compares a push's output-layer row W_c with the same row of the trusted gradient on the
claimed mix. Late in training that row is made of the few trusted digits of c the model still gets wrong,
and an honest device whose digits are unlike them drifts under the threshold (docs/robustness-history.md, the
eleventh and twelfth looks: up to 20% of honest pushes at weight 0 on seed 3 at 12,000 pushes). A
steadier reference is the class's *template*: the mean penultimate features φ_c of the trusted digits of c,
less the mean over the classes, which does not depend on what the model gets wrong now. For softmax
cross-entropy a one-digit gradient is ∂W_k = (p_k − y_k) h and ∂b_k = p_k − y_k, so h = ∂W_k / ∂b_k: the
features come from the same gradient port, one digit at a time (label-check's ``class_templates``,
refreshed every ``--every`` versions).

An honest −∂W_c adds the features of c's digits (and takes away those of digits mistaken for c); a
backdoor's target row adds the features of other digits carrying the trigger. This records, per push, the
lowest cosine over the claimed major classes of −∂W_c with the template (``template``) and with the
trusted gradient's row (``rows``, the test as it is), and each device's standing in each (label-check's
exponential average over ``--memory`` pushes; ``either``: the larger of the two standings, a device
failing only when it fails both; ``blend``: the template's cosine weighed by label-check's settledness,
the trusted row's by the rest). With ``--oracle`` the Byzantine pushes are withheld after
being recorded (a perfect filter: the fleet honest devices face once the attackers are stopped).

Not an experiment (no results file): one JSON line per run, per-device standings early and late.
``python -m lab.probes.row_templates --seeds 1000,1001 --attacks backdoor-inset6,backdoor --oracle``
"""

from __future__ import annotations

import argparse
import json
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from lab.probes.backdoor_rows import _cosine
from server.strategies.base import Arrival
from server.strategies.trusted_score import TrustedScore
from server.strategies.wrappers import StrategyWrapper


class TemplateRecorder(StrategyWrapper):
    """Records both row statistics of every push, then passes it on (or withholds a Byzantine one)."""

    def __init__(self, inner: Any, reference: Any, byzantine: Any, *, every: int, memory: int,
                 oracle: bool) -> None:  # fmt: skip
        super().__init__(inner)
        self.reference, self.byzantine = reference, byzantine
        self.every, self.memory, self.oracle = every, memory, oracle
        self.templates: np.ndarray | None = None
        self.templates_at = -(10**9)
        self.by_label: dict[int, np.ndarray] = {}
        self.label_at = -1
        self.standing: dict[str, dict[str, float]] = {"template": {}, "rows": {}, "blend": {}}
        self.records: list[tuple[str, bool, int, float, float, float, float]] = []
        self.residuals: deque[float] = deque(maxlen=200)

    def refresh(self, version: int) -> None:
        """The class templates at the current parameters (``SimulatedReference.templates``, label-check's
        own), every ``every`` versions."""
        if version - self.templates_at < self.every and self.templates is not None:
            return
        self.templates, self.templates_at = self.reference.templates(), version

    def trusted_rows(self, version: int, freq: np.ndarray, head: tuple[slice, slice]) -> np.ndarray | None:
        if version != self.label_at:
            self.label_at, self.by_label = version, {}
        mixed = None
        for c in np.flatnonzero(freq > 0):
            if int(c) not in self.by_label:
                g = self.reference.gradient(int(c))
                if g is None:
                    continue
                self.by_label[int(c)] = g
            part = self.by_label[int(c)][head[0]] * freq[c]
            mixed = part if mixed is None else mixed + part
        return None if mixed is None else mixed.reshape(len(freq), -1)

    def receive(self, arrival: Arrival) -> float:
        head = self.reference.head()
        counts = arrival.label_counts
        if head is not None and counts is not None and counts.sum() > 0:
            version = arrival.base_version + arrival.staleness
            self.refresh(version)
            assert self.templates is not None
            freq = counts / counts.sum()
            rows = arrival.gradient[head[0]].reshape(len(freq), -1)
            major = np.flatnonzero(freq >= min(0.2, float(freq.max())))
            template = min(_cosine(-rows[c], self.templates[c]) for c in major)
            trusted = self.trusted_rows(version, freq, head)
            row = 0.0 if trusted is None else min(_cosine(rows[c], trusted[c]) for c in major)
            device = arrival.device_id
            t = TrustedScore.remembered(self.standing["template"], device, template, self.memory)
            r = TrustedScore.remembered(self.standing["rows"], device, row, self.memory)
            settled = 1.0 - min(float(np.median(self.residuals)) / 0.1, 1.0) if self.residuals else 0.0
            mixed = settled * template + (1.0 - settled) * row
            b = TrustedScore.remembered(self.standing["blend"], device, mixed, self.memory)
            self.records.append((device, bool(self.byzantine(device)), version, t, r, max(t, r), b))
            if not self.byzantine(device):  # label-check's residual: of the pushes it passed
                self.residuals.append(0.5 * float(np.abs(arrival.gradient[head[1]]).sum()))
        if self.oracle and self.byzantine(arrival.device_id):
            self.inner.withheld(arrival)
            return 0.0
        return self.inner.receive(arrival)


def one(job: tuple[str, int, bool, int, int, str]) -> dict[str, Any]:
    from lab.experiments.default_search import bench_for, collapsed, final
    from lab.experiments.robust import ATTACKS, FLEETS, TRUSTED_SAMPLES, Run, SimulatedReference, defended
    from sim.adversary import adversary, backdoor_success

    attack, seed, oracle, every, memory, fleet = job
    run = Run("none", None if attack == "clean" else attack, 0.3, fleet, seed)
    w = FLEETS[fleet]
    w = replace(w, data_seed=seed, split_seed=seed)
    bench = bench_for(w)
    rows = np.random.default_rng([seed, 77]).choice(len(bench.train.y), TRUSTED_SAMPLES, replace=False)
    reference = SimulatedReference(bench, rows)
    attacker = None
    if run.attack is not None:
        params = dict(ATTACKS.get(attack, {}))
        params.pop("truthful", None)
        attacker = adversary(params.pop("attack", attack), devices=w.devices, attackers=run.attackers,
                             seed=seed, claim=None, **params)  # fmt: skip
    holder: dict[str, Any] = {}

    def byzantine(device_id: str) -> bool:
        if attacker is None:
            return False
        ids = {vd.device.device_id: i for i, vd in enumerate(holder["sim"].devices)}
        return attacker.is_byzantine(ids[device_id])

    def strategy() -> Any:
        holder["recorder"] = TemplateRecorder(defended(run, reference), reference, byzantine,
                                              every=every, memory=memory, oracle=oracle)  # fmt: skip
        return holder["recorder"]

    sim = w.fleet(bench, strategy, seed=seed, adversary=attacker)
    holder["sim"] = sim
    reference.core = sim.core
    result = sim.run(max_gradients=w.gradients, give_up=collapsed)
    records = holder["recorder"].records
    last = max(r[2] for r in records)
    out: dict[str, Any] = {
        "attack": attack, "seed": seed, "oracle": oracle, "fleet": fleet, "final": final(result.accuracy),
        "backdoor_success": backdoor_success(bench, sim.core.run.params, attacker.attack)
        if attacker is not None and attack.startswith("backdoor") else None,
    }  # fmt: skip
    for name, index in (("template", 3), ("rows", 4), ("either", 5), ("blend", 6)):
        for phase, lo, hi in (("early", 0.0, 0.25), ("middle", 0.25, 0.5), ("late", 0.5, 1.01)):
            per_device: dict[str, list[float]] = {}
            kinds: dict[str, bool] = {}
            for r in records:
                if lo * last <= r[2] < hi * last:
                    per_device.setdefault(r[0], []).append(r[index])
                    kinds[r[0]] = r[1]
            for group, flag in (("honest", False), ("byzantine", True)):
                lows = sorted(round(float(np.quantile(v, 0.05)), 2) for d, v in per_device.items()
                              if kinds[d] == flag)  # fmt: skip
                if lows:
                    out[f"{name}_{phase}_{group}_p5"] = lows
                under = [x for d, v in per_device.items() if kinds[d] == flag for x in v]
                if under:
                    out[f"{name}_{phase}_{group}_under0"] = round(float(np.mean(np.array(under) < 0)), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attacks", default="clean,backdoor-inset6")
    parser.add_argument("--seeds", default="1000")
    parser.add_argument("--fleet", default="peer-mlp-long")
    parser.add_argument("--oracle", action="store_true", help="withhold every Byzantine push once recorded")
    parser.add_argument("--every", type=int, default=20, help="versions between template refreshes")
    parser.add_argument("--memory", type=int, default=30, help="a standing's span, in pushes")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    jobs = [(a, int(s), args.oracle, args.every, args.memory, args.fleet)
            for s in args.seeds.split(",") for a in args.attacks.split(",")]  # fmt: skip
    from lab.experiments.protocol import one_blas_thread

    with ProcessPoolExecutor(args.workers, initializer=one_blas_thread) as pool:
        for line in pool.map(one, jobs):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
