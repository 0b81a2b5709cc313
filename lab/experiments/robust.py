"""Issue 30: the attacks crossed with the defences, in the simulator (`fleet experiment robust`).

Every run is a ``sim.workloads.Workload`` fleet (real ONNX gradients, virtual seconds, always-online devices
at fixed speeds) running the default strategy inside one defence (server/strategies: Kardam, centered
clipping, robust aggregation, trusted scoring, norm bounding with noise), with the first share of its
devices Byzantine (sim/adversary.py: omniscient, colluding; the attacks are client/_attacks/, the ones
``fleet worker --attack`` runs). Each run reports its final accuracy (mean of the last 5 evaluations),
the honest and Byzantine pushes the coordinator gave weight 0, what the defence itself counted, its virtual
seconds to the target, and, for the backdoor, the attack success rate on the triggered test digits.

Two stages, so the recommendation never sees the reported seeds:

1. **Choose** on ``tune_seed``: every defence against every attack (and none) at ``share`` attackers on the
   first fleet; the recommended defence is the one that loses the fewest attacks (more than 2 points below
   the clean fleet, or a backdoor trigger past 10% success), then has the smallest worst gap, then misses
   the fewest of the other targets, each counted once (≤ 10% honest pushes dropped, ≤ 1.2× the undefended
   time to the target with no attack): ``standing``. Until 2026-11-26 every miss counted, one per attack
   for honest drops too, and the first full choice (at bd1f1a9, seed 1000 only; the reported seeds not yet
   run) ranked centered clipping, which lost 6 attacks by up to 74 points, above FLTrust by device
   standing, which lost 4 by up to 12 but dropped honest work under each attack. The rule was changed for
   that. Until 2026-11-29 the backdoor counted once, however many triggers passed, so a defence stopping
   one trigger of two tied with one stopping neither (docs/robustness.md, the third look).
2. **Report** on ``seeds``: the undefended default, Kardam, the recommended defence (and ``report_top``
   more of stage 1's best) against every attack on the first fleet, the undefended and the recommended
   on the others, and the recommended one against each attack at every share of ``shares`` (the heatmap
   and the f-curve). About 570 runs: about 80 minutes on 2 cores (one BLAS thread a worker: protocol.py
   ``one_blas_thread``).

A seed is the data's shuffle and split and the simulator's timing and batches: ``Workload`` with its
seeds replaced. The rates are the default's own (untuned); the defences' own parameters are their
defaults (chosen by their authors' probes on other data: tests/test_robust_wrappers.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from lab.contract import Context, Experiment, Plan, Result
from sim.workloads import Workload

NAME = "robust"
TARGET_GAP, TARGET_HONEST_DROP, TARGET_ASR, TARGET_COST = 0.02, 0.10, 0.10, 1.2

# the fleets: the peer workload's 20 non-IID devices (random 2-label shards, 7x speed spread) with the MLP
# (where every defence meets every attack: the CNN costs 5x the time) and with the thesis CNN (the
# undefended and the recommended), a 100-device fleet (MLP); a tiny one for the quick plan
FLEETS: dict[str, Workload] = {
    "peer-mlp": Workload("peer-mlp", "labels-2", model="mlp", gradients=3000),
    "peer": Workload("peer", "labels-2", gradients=3000),
    "fleet100": Workload("fleet100", "labels-2", devices=100, model="mlp", gradients=6000),
    "quick": Workload("quick", "labels-2", devices=10, model="logreg", gradients=300),
}
TARGETS = {"peer-mlp": 0.85, "peer": 0.90, "fleet100": 0.85, "quick": 0.60}  # fixed before any run

FLTRUST_DEVICE = {"name": "trusted-score", "test": "fltrust", "scale": "fleet", "device_memory": 10}
# the same against the trusted digits of the device's own labels, never lengthened, weighing ≤ its own
FLTRUST_LABELS_DEVICE = {**FLTRUST_DEVICE, "scale": "fleet-down", "by_labels": "device", "max_weight": 1.0}
# label-check's claim test (a lie about one's labels is caught) around FLTrust scoring each part (an honest
# output layer over an attacked rest is caught): the two adaptive ways past each alone
PARTS_CHECK = ({**FLTRUST_LABELS_DEVICE, "parts": "each"}, {"name": "label-check"})
BOUND = {"name": "trusted-bound"}
# defence → the wrappers around the default strategy (server/settings.py's FLEET_WRAPPERS entries)
DEFENCES: dict[str, tuple[dict[str, Any], ...]] = {
    "none": (),
    "kardam": ({"name": "kardam"},),  # its f: KARDAM_SHARE of the fleet, attacked or not
    "centered-clip": ({"name": "centered-clip"},),
    "geometric-median": ({"name": "robust-aggregation", "statistic": "geometric-median"},),
    "trimmed-mean": ({"name": "robust-aggregation", "statistic": "trimmed-mean"},),
    "median": ({"name": "robust-aggregation", "statistic": "median"},),
    "trusted-score": ({"name": "trusted-score"},),  # its reference gradient: the simulator's (below)
    "fltrust": ({"name": "trusted-score", "test": "fltrust"},),  # the same reference, FLTrust's weighing
    # FLTrust by each device's standing (its last ~10 scores), at the fleet's norm: recommended until
    # 2026-11-28 (IPM cost it 18-33 points, and it gave 19-59% of honest pushes weight 0)
    "fltrust-device": (FLTRUST_DEVICE,),
    # the same, only the longer gradients brought down to the fleet's norm (a short one is never amplified)
    "fltrust-device-down": ({**FLTRUST_DEVICE, "scale": "fleet-down"},),
    # and scored against the trusted digits of the labels a device says it trained on, by each push's claim
    # or by all the device's claims so far, no gradient weighing over its own (its attackers lie: each
    # claims the label its gradient agrees with most, per push or once for good: sim/adversary.py)
    "fltrust-labels": ({**FLTRUST_DEVICE, "scale": "fleet-down", "by_labels": "push"},),
    "fltrust-labels-device": (FLTRUST_LABELS_DEVICE,),
    # the same, a standing under half the recent median scored 0 (its norm no longer drags the fleet's down)
    "fltrust-labels-floor": ({**FLTRUST_LABELS_DEVICE, "floor": 0.5},),
    # or a device whose cosine with the whole trusted gradient averages under −0.1 over its last ~100 (seed
    # 1000's logged cosines: 0.0-0.3% of honest pushes fall under it, clean and under sign-flip)
    "fltrust-labels-veto": ({**FLTRUST_LABELS_DEVICE, "veto": 0.1},),
    # or the output layer and the layers under it each scored, the lower cosine kept (the body probe,
    # lab/probes/backdoor_rows.py: alie-head's pushes agree as a whole, not below the output layer)
    "fltrust-labels-parts": ({**FLTRUST_LABELS_DEVICE, "parts": "each"},),
    "norm-noise": ({"name": "norm-noise", "noise": 0.01},),
    # the last, and of what it lets through only the parameters 40% of the devices move (sign-vote's
    # support count: the corner backdoor's weights get no honest gradient)
    # and each push held to its claimed labels at the output layer (server/strategies/label_check.py)
    "fltrust-labels-check": (FLTRUST_LABELS_DEVICE, {"name": "label-check"}),
    "fltrust-labels-rows": (FLTRUST_LABELS_DEVICE, {"name": "label-check", "threshold": 0.25}),
    # label-check's claim test around FLTrust scoring each part (PARTS_CHECK, above)
    "fltrust-parts-check": PARTS_CHECK,
    # and each push's coordinates bounded by their share of the trusted gradients (4x; or 2, 3, 8x): the
    # backdoor's patch feeds weights the trusted digits barely move (server/strategies/trusted_bound.py)
    "fltrust-parts-check-bound": ({"name": "trusted-bound"}, *PARTS_CHECK),
    **{f"fltrust-parts-check-bound{b}": ({**BOUND, "bound": b}, *PARTS_CHECK) for b in (2, 3, 8)},
    # the output layer left unbounded (a device's labels concentrate its gradient there)
    "fltrust-parts-check-body-bound": ({**BOUND, "layers": "body"}, *PARTS_CHECK),
    "fltrust-labels-support": (
        {"name": "sign-vote", "count": "support", "against": "zero", "threshold": 0.4},
        FLTRUST_LABELS_DEVICE,
    ),
}
# attack → its parameters (client/_attacks/); None: a clean fleet
ATTACKS: dict[str, dict[str, Any]] = {
    "sign-flip": {},
    "scaled": {"k": 1.0},  # −g: as large as an honest gradient, no norm filter can tell
    "gaussian": {},
    "label-flip": {},
    "stale-replay": {},
    "alie": {},
    "ipm": {"epsilon": 0.1},
    "backdoor": {},
    # the same trigger 4 pixels in from the corner, where 12% of clean digits have ink: honest devices move
    # its weights too, so a defence that stops what only attackers move does not see it (adaptive)
    "backdoor-inset": {"attack": "backdoor", "inset": 4},
    # the inset trigger learnt through the hidden layers only, the output layer's gradient and the labels
    # claimed the clean batch's: against label-check, which reads the output layer (adaptive)
    "backdoor-head": {"attack": "backdoor", "inset": 4, "honest_head": True},
    # 6 pixels in, where 45% of clean digits have ink: the trusted digits move its weights more (adaptive,
    # against trusted-bound, whose limit follows them)
    "backdoor-inset6": {"attack": "backdoor", "inset": 6},
    # the inset trigger with each coordinate held to 4x its share of the honest gradients the attackers
    # see: what the trusted bound lets through, pushed as is (adaptive, against trusted-bound)
    "backdoor-bounded": {"attack": "backdoor", "inset": 4, "bounded": 4.0},
    # and two gradient attacks the same way: label-check's claim test stops them when the whole gradient lies
    "sign-flip-head": {"attack": "sign-flip", "honest_head": True},
    "alie-head": {"attack": "alie", "honest_head": True},
    # ALIE telling its true labels to a defence that reads them (otherwise it claims the best-agreeing label)
    "alie-truthful": {"attack": "alie", "truthful": True},
}
# not an attack: the attackers' pushes never reach the server, what a perfect filter keeps (sim/adversary.py)
SILENT = "silent"
BACKDOORS = tuple(a for a, params in ATTACKS.items() if params.get("attack", a) == "backdoor")
TRUSTED_SAMPLES = 64
KARDAM_SHARE = 0.3  # the Byzantine share Kardam assumes (the thesis: f = 3 of n = 10), clean runs too
COUNTED = ("dropped", "clipped", "downweighted")  # a defence's own counters (describe()) worth reporting


@dataclass(frozen=True)
class Run:
    defence: str
    attack: str | None  # None: no attackers
    share: float  # of the devices, Byzantine
    fleet: str
    seed: int

    def key(self) -> str:
        return f"{self.defence}_{self.attack or 'clean'}_{self.share}_{self.fleet}_s{self.seed}"

    def spec(self) -> dict[str, Any]:
        return {
            "run": asdict(self),
            "fleet": asdict(FLEETS[self.fleet]),
            "defence": DEFENCES[self.defence],
            "attack": None if self.attack is None else ATTACKS.get(self.attack, {"attack": self.attack}),
            "v": 1,
        }

    @property
    def attackers(self) -> int:
        return 0 if self.attack is None else max(1, round(self.share * FLEETS[self.fleet].devices))


class SimulatedReference:
    """The ``ReferenceGradient`` port in the simulator: the loss gradient on a few training digits the
    server holds (a fixed draw, never the test digits), at the fleet's current parameters."""

    def __init__(self, bench: Any, rows: np.ndarray) -> None:
        self.bench, self.rows, self.core = bench, rows, None
        self.at: int | None = None  # the version the gradients below are of (each computed once a version)
        self.computed: dict[int | None, np.ndarray] = {}

    def gradient(self, label: int | None = None) -> np.ndarray | None:
        rows = self.rows if label is None else self.rows[self.bench.train.y[self.rows] == label]
        if self.core is None or self.core.run is None or not len(rows):
            return None
        if self.at != self.core.run.version:
            self.at, self.computed = self.core.run.version, {}
        if label not in self.computed:
            x, y = self.bench.train.x[rows], self.bench.train.y[rows]
            self.computed[label] = self.bench.gradients.loss_and_gradient(self.core.run.params, x, y)[1]
        return self.computed[label]

    def head(self) -> tuple[slice, slice] | None:
        return None if self.core is None or self.core.run is None else self.core.run.manifest.head()


def defended(run: Run, reference: SimulatedReference) -> Any:
    """The default strategy inside ``run``'s defence (Kardam assumes ``KARDAM_SHARE`` of the devices)."""
    from server.strategies import WRAPPERS, default_max_step, default_strategy, make_strategy, wrap

    model = FLEETS[run.fleet].model
    name, rate = default_strategy(model)  # at the model's own rate and step cap, as deployed
    configs = []
    for config in DEFENCES[run.defence]:
        fields = dict(config)
        if fields["name"] == "kardam":
            fields["f"] = round(KARDAM_SHARE * FLEETS[run.fleet].devices)
        configs.append(WRAPPERS[fields["name"]].settings(**fields))
    strategy = make_strategy(name, learning_rate=rate, max_step=default_max_step(model))
    return wrap(strategy, configs, reference=reference)


def simulate(run: Run) -> dict[str, Any]:
    from lab.experiments.default_search import bench_for, collapsed, final
    from server.strategies import layers
    from sim.adversary import adversary, backdoor_success

    w = replace(FLEETS[run.fleet], data_seed=run.seed, split_seed=run.seed)
    bench = bench_for(w)
    rows = np.random.default_rng([run.seed, 77]).choice(len(bench.train.y), TRUSTED_SAMPLES, replace=False)
    reference = SimulatedReference(bench, rows)
    attack = None
    if run.attack is not None:
        reads = {config.get("by_labels", "none") for config in DEFENCES[run.defence]}  # lie to one that reads
        claim = "commit" if "device" in reads else "push" if "push" in reads else None
        if any(config["name"] == "label-check" for config in DEFENCES[run.defence]):
            claim = None  # its claim test catches a lie (lab/probes/backdoor_rows.py): the truth, then
        params = dict(ATTACKS.get(run.attack, {}))  # SILENT: the bound, no attack
        if params.pop("truthful", False):  # they tell their true labels, whatever reads them
            claim = None
        attack = adversary(
            params.pop("attack", run.attack), devices=w.devices, attackers=run.attackers, seed=run.seed,
            claim=claim, **params,
        )  # fmt: skip
    sim = w.fleet(bench, lambda: defended(run, reference), seed=run.seed, adversary=attack)
    reference.core = sim.core
    result = sim.run(max_gradients=w.gradients, give_up=collapsed)
    hit = result.first_time_at(TARGETS[run.fleet])
    counted: dict[str, Any] = {}
    for _, layer in layers(sim.core.run.strategy):
        for key, value in layer.describe().items():
            if any(word in key for word in COUNTED) and not key.startswith("last"):
                counted[key] = value
    backdoor = None
    if run.attack in BACKDOORS and attack is not None:
        backdoor = backdoor_success(bench, sim.core.run.served(), attack.attack)  # type: ignore[arg-type]
    return {
        "run": asdict(run),
        "attackers": run.attackers,
        "times": [round(t, 3) for t in result.times],
        "accuracy": [round(a, 4) for a in result.accuracy],
        "final": final(result.accuracy),
        "time_to_target": hit[0] if hit else None,
        "end_time": result.end_time,
        "diverged": bool(result.diverged or collapsed(result)),
        "pushes": attack.counts()
        if attack is not None
        else {"honest": result.gradients, "honest_dropped": result.dropped},
        "defence_counts": counted,
        "backdoor_success": backdoor,
    }


# the choice's candidates: the published defences, ours as they were each recommended or probed, and Kardam
# (the probes' variants of the bound, 2x, 3x and 8x, are left to lab/probes/body_score.py)
CANDIDATES = (
    *("none", "kardam", "centered-clip", "geometric-median", "trimmed-mean", "median", "trusted-score"),
    *("fltrust", "norm-noise", "fltrust-labels-device", "fltrust-labels-veto", "fltrust-labels-support"),
    *("fltrust-parts-check", "fltrust-parts-check-bound", "fltrust-parts-check-body-bound"),
)


@dataclass(frozen=True, kw_only=True)
class RobustPlan(Plan):
    # the first: choice, heatmap, curve; "peer" (the thesis CNN, 5x the time a run) is not in the full plan
    # since 2026-11-29: its last measurements are in docs/robustness.md
    fleets: tuple[str, ...] = ("peer-mlp", "fleet100")
    defences: tuple[str, ...] = CANDIDATES
    attacks: tuple[str, ...] = tuple(ATTACKS)
    share: float = 0.3  # the heatmap's: 3 of 10
    shares: tuple[float, ...] = (0.1, 0.2, 0.3)  # the recommended defence's f-curve (1, 2, 3 of 10)
    tune_seed: int = 1000
    seeds: tuple[int, ...] = (1, 2, 3)
    report_top: int = 0  # more of stage 1's best reported on the seeds beside none, Kardam, the chosen
    fleet_shares: tuple[tuple[str, float], ...] = (("fleet100", 0.1),)  # 10 of 100; others: ``share``
    workers: int | None = None


FULL = RobustPlan()
QUICK = RobustPlan(quick=True, fleets=("quick",), defences=("none", "centered-clip", "geometric-median"),
                   attacks=("sign-flip", "alie"), shares=(0.3,), seeds=(1,))  # fmt: skip


def judge(
    runs: dict[str, dict[str, Any]], clean: dict[str, Any], baseline_time: float | None
) -> dict[str, Any]:
    """One defence on one seed and fleet: its gap to the undefended clean fleet under each attack, the honest
    pushes it dropped, the backdoor's success, its cost with no attack, and which targets it misses."""
    reference = clean["final"]
    gaps = {a: round(reference - r["final"], 4) for a, r in runs.items() if a != "clean"}
    dropped = {
        a: r["pushes"]["honest_dropped"] / r["pushes"]["honest"] if r["pushes"]["honest"] else None
        for a, r in runs.items()
    }
    own = runs.get("clean")
    cost = None
    if own is not None and baseline_time:
        cost = own["time_to_target"] / baseline_time if own["time_to_target"] is not None else math.inf
    by_trigger = {a: runs[a]["backdoor_success"] for a in BACKDOORS if a in runs}
    asr = max(by_trigger.values(), default=None)  # the worst trigger's
    misses = [a for a, g in gaps.items() if g > TARGET_GAP]
    misses += [f"drop:{a}" for a, d in dropped.items() if d is not None and d > TARGET_HONEST_DROP]
    misses += ["backdoor-success"] if asr is not None and asr > TARGET_ASR else []
    misses += ["cost"] if cost is not None and cost > TARGET_COST else []
    return {
        "gaps": gaps,
        "worst_gap": max(gaps.values(), default=0.0),
        "honest_dropped": dropped,
        "backdoor_success": asr,
        "backdoor_by_trigger": by_trigger,
        "cost": cost,
        "misses": misses,
    }


def standing(judged: dict[str, Any]) -> tuple[int, float, int]:
    """A defence's rank on the tuning seed: the attacks it loses first (more than the gap target below the
    clean fleet, or for a backdoor, its success past the target: each trigger an attack of its own), then
    its worst gap, then the other targets it misses, each counted once (honest drops, cost)."""
    by_trigger = judged.get("backdoor_by_trigger") or {}
    lost = {a for a, gap in judged["gaps"].items() if gap > TARGET_GAP}
    lost |= {a for a, success in by_trigger.items() if success is not None and success > TARGET_ASR}
    counted = {*judged["gaps"], "backdoor-success"}
    others = {m.split(":")[0] for m in judged["misses"] if m not in counted}
    return len(lost), judged["worst_gap"], len(others)


def run(plan: RobustPlan, ctx: Context) -> Result:
    from lab.experiments import protocol as p

    runner = p.Runner.of(ctx, plan.workers, work=simulate)
    first = plan.fleets[0]

    def cells(defences: tuple[str, ...], attacks: tuple[str | None, ...], shares: tuple[float, ...],
              fleets: tuple[str, ...], seeds: tuple[int, ...]) -> list[Run]:  # fmt: skip
        return [Run(d, a, s if a is not None else 0.0, f, seed) for seed in seeds for f in fleets
                for d in defences for a in attacks
                for s in (shares if a is not None else (0.0,))]  # fmt: skip

    attacks: tuple[str | None, ...] = (None, *plan.attacks)
    at = {f: dict(plan.fleet_shares).get(f, plan.share) for f in plan.fleets}  # each fleet's share
    # the bound beside the defences: the attackers take their tasks and their pushes are lost on the way
    where = [(first, plan.share, (plan.tune_seed,)), *((f, at[f], plan.seeds) for f in plan.fleets),
             *((first, share, plan.seeds) for share in plan.shares)]  # fmt: skip
    bounds = list(
        dict.fromkeys(Run("none", SILENT, share, f, seed) for f, share, seeds in where for seed in seeds)
    )
    # 1. choose on the tuning seed
    tuning = runner.run(cells(plan.defences, attacks, (plan.share,), (first,), (plan.tune_seed,)))
    chosen_on = {d: judged(tuning, d, first, plan.tune_seed, plan.share, plan.attacks) for d in plan.defences}
    ranked = sorted((d for d in plan.defences if d != "none"), key=lambda d: standing(chosen_on[d]))
    recommended = ranked[0]
    reported = tuple(dict.fromkeys(("none", "kardam", recommended, *ranked[: plan.report_top])))
    reported = tuple(d for d in reported if d in plan.defences)
    # 2. report on the seeds: the heatmap (the reported defences on the first fleet, the undefended and the
    # recommended one on the others: Kardam is the thesis's, measured where the thesis measured it), the
    # recommended defence's curve over the attackers' share
    on = {f: reported if f == first else ("none", recommended) for f in plan.fleets}
    jobs = [job for f in plan.fleets for job in cells(on[f], attacks, (at[f],), (f,), plan.seeds)]
    jobs += cells((recommended,), tuple(plan.attacks), plan.shares, (first,), plan.seeds)
    done = runner.run(jobs + bounds)
    done.update(tuning)
    heatmap = {
        f: {d: [judged(done, d, f, seed, at[f], plan.attacks) for seed in plan.seeds] for d in on[f]}
        for f in plan.fleets
    }
    curve = {
        recommended: {str(s): {a: [done[Run(recommended, a, s, first, seed)]["final"] for seed in plan.seeds]
                               for a in plan.attacks}
                      for s in plan.shares}
    }  # fmt: skip
    bound: dict[str, dict[str, dict[str, float]]] = {}  # fleet → share → seed → the clean fleet's lead
    for b in bounds:
        lead = done[Run("none", None, 0.0, b.fleet, b.seed)]["final"] - done[b]["final"]
        bound.setdefault(b.fleet, {}).setdefault(str(b.share), {})[str(b.seed)] = round(lead, 4)
    summary = {
        "quick": plan.quick,
        "fleets": {f: {**asdict(FLEETS[f]), "target": TARGETS[f]} for f in plan.fleets},
        "share": plan.share,
        "fleet_shares": at,
        "shares": list(plan.shares),
        "tune_seed": plan.tune_seed,
        "seeds": list(plan.seeds),
        "targets": {
            "gap": TARGET_GAP,
            "honest_drop": TARGET_HONEST_DROP,
            "asr": TARGET_ASR,
            "cost": TARGET_COST,
        },
        "choice": chosen_on,
        "recommended": recommended,
        "reported": list(reported),
        "heatmap": heatmap,
        "curve": curve,
        "bound": bound,
    }
    outputs = list(done.values())
    return Result(summary, records={"runs": [{k: v for k, v in o.items() if k != "times"} for o in outputs]})


def judged(done: dict[Run, dict[str, Any]], defence: str, fleet: str, seed: int, share: float,
           attacks: tuple[str, ...]) -> dict[str, Any]:  # fmt: skip
    """``judge`` over the runs of one defence, fleet and seed."""
    clean = done[Run("none", None, 0.0, fleet, seed)]
    runs = {a: done[Run(defence, a, share, fleet, seed)] for a in attacks}
    runs["clean"] = done[Run(defence, None, 0.0, fleet, seed)]
    return judge(runs, clean, clean["time_to_target"])


def markdown(result: Result, plan: RobustPlan) -> str:
    from lab.experiments.robust_report import markdown as render

    return render(result, plan)


def plot(result: Result) -> Any:
    from lab.experiments.robust_report import plot as render

    return render(result)


EXPERIMENT = Experiment(NAME, QUICK, FULL, run, markdown, plot, title="Byzantine robustness")
