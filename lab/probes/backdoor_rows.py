"""Issue 30's backdoor probe: what in a push tells a backdoor attacker from an honest device?

Every defence so far let the backdoor through (98-100% success at 30% attackers): its gradient is close
to an honest one as a whole. This probe records, for every push of a run with no defence, two things a
server can check against the labels the push says it trained on (``label_counts``):

- ``bias``: with softmax cross-entropy averaged over the batch, the last layer's bias gradient is
  ∂b_c = mean p_c − freq_c, and mean p_c ∈ [0, 1], so an honest push always has −∂b_c ≤ freq_c: the
  violation max_c(−∂b_c − freq_c) is ≤ 0 up to rounding, exactly. A claim that leaves out labels the
  batch held breaks it.
- ``rows``: the cosine of each claimed class's row of the last layer's weight gradient with the same row
  of the trusted reference on the claimed mix (Σ_c freq_c g_s(c)): a poisoned batch pulls the target's row
  toward the features of other digits.
- ``body``: the cosine of the layers under the output layer with the same part of that reference (and
  ``body_device``, a device's last 10): an attack that keeps the output layer honest (``honest_head``)
  carries its attack there.

Attackers report either their batch's true labels (``--claim true``: the poisoned batch's, target
included) or one label for good (``--claim commit``: the lie sim/adversary.py tells label-reading defences).
Not an experiment (no results file): one line per group (honest, Byzantine) with each statistic's quantiles.
``python -m lab.probes.backdoor_rows --attack backdoor --claim true``
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

import numpy as np

from server.strategies.base import Arrival
from server.strategies.wrappers import StrategyWrapper


class RowRecorder(StrategyWrapper):
    """Passes every arrival on unchanged and records the probe's statistics for it."""

    def __init__(
        self, inner: Any, reference: Any, manifest: Any, byzantine: Any, oracle: bool = False
    ) -> None:
        super().__init__(inner)
        self.reference, self.manifest, self.byzantine, self.oracle = reference, manifest, byzantine, oracle
        *_, self.weight_name, self.bias_name = (p.name for p in manifest.params)
        self.rows: list[dict[str, Any]] = []
        self.memory: dict[str, list[float]] = {}
        self.bodies: dict[str, list[float]] = {}
        self.by_label: dict[int, np.ndarray] = {}
        self.version = -1

    def references(self, version: int) -> dict[int, np.ndarray]:
        """g_s(c) for every label at the current parameters, once per version."""
        if version != self.version:
            self.version = version
            found = {c: self.reference.gradient(c) for c in range(self.manifest.num_classes)}
            self.by_label = {c: g for c, g in found.items() if g is not None}
        return self.by_label

    def receive(self, arrival: Arrival) -> float:
        counts = arrival.label_counts
        refs = self.references(arrival.base_version + arrival.staleness)
        if counts is not None and counts.sum() > 0 and refs:
            freq = counts / counts.sum()
            parts = self.manifest.split(arrival.gradient)
            bias = parts[self.bias_name]
            mixed = sum(freq[c] * refs[c] for c in refs if freq[c] > 0)
            record: dict[str, Any] = {
                "device": arrival.device_id,
                "claimed": [int(c) for c in np.flatnonzero(freq >= 0.2)],
                "byzantine": self.byzantine(arrival.device_id),
                "bias": float(np.max(-bias - freq)),
                "whole": _cosine(arrival.gradient, mixed) if isinstance(mixed, np.ndarray) else None,
            }
            if isinstance(mixed, np.ndarray):
                rows, ref_rows = parts[self.weight_name], self.manifest.split(mixed)[self.weight_name]
                claimed = np.flatnonzero(freq > 0)
                cosines = [_cosine(rows[c], ref_rows[c]) for c in claimed]
                record["rows_min"] = min(cosines)
                record["rows_weighted"] = float(np.dot(freq[claimed], cosines))
                major = [cos for c, cos in zip(claimed, cosines, strict=True) if freq[c] >= 0.2]
                record["rows_major_min"] = min(major) if major else 1.0
                memory = self.memory.setdefault(arrival.device_id, [])
                memory.append(record["rows_weighted"])
                record["rows_device"] = float(np.mean(memory[-10:]))
                # the layers under the head on their own: alie-head keeps the head honest and the rest ALIE
                body = self.manifest.num_params - rows.size - bias.size
                record["body"] = _cosine(arrival.gradient[:body], mixed[:body])
                bodies = self.bodies.setdefault(arrival.device_id, [])
                bodies.append(record["body"])
                record["body_device"] = float(np.mean(bodies[-10:]))
                # the rows of classes not claimed: only pushed down (+p·h) by an honest batch
                unclaimed = [c for c in range(len(freq)) if freq[c] == 0]
                record["unclaimed_row_share"] = float(
                    np.linalg.norm(rows[unclaimed]) / max(np.linalg.norm(rows), 1e-12)
                )
            self.rows.append(record)
        if self.oracle and self.byzantine(arrival.device_id):  # a perfect filter: what it would face
            self.inner.withheld(arrival)
            return 0.0
        return self.inner.receive(arrival)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return 0.0 if na == 0 or nb == 0 else float(np.dot(a, b) / (na * nb))


def probe(attack: str, claim: str, seed: int, gradients: int, oracle: bool = False) -> dict[str, Any]:
    from lab.experiments.default_search import bench_for, collapsed, final
    from lab.experiments.robust import ATTACKS, FLEETS, TRUSTED_SAMPLES, Run, SimulatedReference, defended
    from models.manifest import builtin
    from sim.adversary import adversary, backdoor_success

    run = Run("none", attack, 0.3, "peer-mlp", seed)
    w = replace(FLEETS[run.fleet], data_seed=seed, split_seed=seed, gradients=gradients)
    bench = bench_for(w)
    rows = np.random.default_rng([seed, 77]).choice(len(bench.train.y), TRUSTED_SAMPLES, replace=False)
    reference = SimulatedReference(bench, rows)
    params = dict(ATTACKS.get(attack, {}))
    attacker = adversary(
        params.pop("attack", attack), devices=w.devices, attackers=run.attackers, seed=seed,
        claim=None if claim == "true" else "commit", **params,
    )  # fmt: skip
    holder: dict[str, Any] = {}

    def byzantine(device_id: str) -> bool:
        ids = {vd.device.device_id: i for i, vd in enumerate(holder["sim"].devices)}
        return attacker.is_byzantine(ids[device_id])

    def strategy() -> Any:
        holder["recorder"] = RowRecorder(
            defended(run, reference), reference, builtin(w.model).manifest, byzantine, oracle
        )
        return holder["recorder"]

    sim = w.fleet(bench, strategy, seed=seed, adversary=attacker)
    holder["sim"] = sim
    reference.core = sim.core
    result = sim.run(max_gradients=w.gradients, give_up=collapsed)
    records = holder["recorder"].rows
    out: dict[str, Any] = {
        "attack": attack, "claim": claim, "seed": seed, "oracle": oracle, "final": final(result.accuracy),
        "backdoor_success": backdoor_success(bench, sim.core.run.params, attacker.attack)
        if attack.startswith("backdoor") else None,
    }  # fmt: skip
    for group in (False, True):
        mine = [r for r in records if r["byzantine"] == group]
        out["byzantine" if group else "honest"] = {
            key: [
                round(float(q), 4) for q in np.quantile([r[key] for r in mine], (0.01, 0.1, 0.5, 0.9, 0.99))
            ]
            for key in (
                "bias",
                "whole",
                "rows_min",
                "rows_weighted",
                "rows_major_min",
                "rows_device",
                "body",
                "body_device",
            )
            if mine and all(r.get(key) is not None for r in mine)
        } | {"pushes": len(mine)}
    devices: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        devices.setdefault(r["device"], []).append(r)
    out["devices"] = sorted(
        (
            bool(rs[0]["byzantine"]),
            round(float(np.median([r["rows_major_min"] for r in rs if "rows_major_min" in r])), 3),
            sorted({c for r in rs for c in r["claimed"]}),
        )
        for rs in devices.values()
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attack", default="backdoor")
    parser.add_argument("--claim", choices=("true", "commit"), default="true")
    parser.add_argument("--seed", type=int, default=1000)  # the robust experiment's tuning seed
    parser.add_argument("--gradients", type=int, default=3000)
    parser.add_argument("--oracle", action="store_true", help="drop every Byzantine push (a perfect filter)")
    args = parser.parse_args()
    print(json.dumps(probe(args.attack, args.claim, args.seed, args.gradients, args.oracle)), flush=True)


if __name__ == "__main__":
    main()
