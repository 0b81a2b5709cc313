"""Async vs sync on a heterogeneous simulated fleet with real stragglers (no staleness controller).

100 devices hold non-IID shards (2 sorted shards of 20 digits; a newcomer after churn draws 2 of the
200 shards at random, so shards overlap); speed classes from Galaxy S6 to S10 (7.2x), lognormal
latency, sessions and churn (sim/population.py). Compared: AdaSGD (K = 1), FedBuff (K = 10), SSGD
whose rounds of 10 wait for the slowest selected device, and SSGD as production runs it (130%
over-selection, a round deadline that drops late devices), and Fleet's default strategy at its own
rate, untuned, in both protocols (issue 19). Reported: virtual time and gradients
computed until 80% test accuracy, under both protocols: (a) every arm at the shared rate of
`staleness` (DynSGD's best under D2), (b) each arm at its own rate, tuned on seed 1000. Also measures
the simulator's overhead at 1,000 devices.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab import cache
from lab.contract import Context, Experiment, Plan, Result
from lab.experiments import protocol as p
from lab.experiments import stats
from lab.experiments.shared_lr import shared_lr
from lab.render import figure, fmt
from server.strategies import default_strategy

ROUND = 10
DEADLINE = 4.0  # seconds: the median device finishes a 100-sample task in about 2 s


BUDGET = 10_000  # gradients per run; a run stops at 80% test accuracy
ARMS = ("adasgd", "fedbuff", "ssgd-wait-all", "ssgd-production", "default")
TUNED = ARMS[:-1]  # the default is never tuned: it runs at its own rate, as a deployment that sets nothing


def arms(lr: float) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "default": (default_strategy()[0], {}),  # its own rate whatever ``lr`` says
        "adasgd": ("adasgd", {"learning_rate": lr}),
        "fedbuff": ("fedbuff", {"learning_rate": lr, "k": ROUND}),
        "ssgd-wait-all": ("ssgd", {"learning_rate": lr, "k": ROUND}),
        "ssgd-production": (
            "ssgd",
            {"learning_rate": lr, "k": ROUND, "over_selection": 1.3, "time_window": DEADLINE},
        ),
    }


@dataclass(frozen=True)
class Run:
    """One arm on one seed: the unit the cached process pool runs."""

    arm: str
    lr: float
    seed: int
    devices: int
    target: float
    budget: int

    def key(self) -> str:
        return f"{self.arm}_lr{self.lr}_s{self.seed}_n{self.devices}"

    def spec(self) -> dict[str, Any]:
        return {"run": asdict(self), "strategy": arms(self.lr)[self.arm]}


def run_one(run: Run) -> dict[str, Any]:
    return simulate(run.arm, run.lr, run.seed, devices=run.devices, target=run.target, budget=run.budget)


def simulate(arm: str, lr: float, seed: int, *, devices: int, target: float, budget: int) -> dict[str, Any]:
    from server.strategies import make_strategy
    from sim.fleet import FleetSimulator

    bench = p.workbench()
    rng = np.random.default_rng([seed, 7])
    order = np.argsort(bench.train.y, kind="stable")
    shards = np.array_split(order, 200)
    dealt = iter(rng.permutation(200).reshape(-1, 2))

    def shard_for(r: np.random.Generator) -> np.ndarray:
        pair = next(dealt, None)
        pair = r.choice(200, 2, replace=False) if pair is None else pair
        return np.concatenate([shards[i] for i in pair])

    name, params = arms(lr)[arm]
    sim = FleetSimulator(
        bench,
        lambda: make_strategy(name, **params),
        devices=devices,
        shard_for=shard_for,
        seed=seed,
        evaluate=target < math.inf,
    )
    result = sim.run(max_gradients=budget, target=target)
    hit = result.first_time_at(0.8)
    return {
        "arm": arm,
        "seed": seed,
        "times": result.times,
        "accuracy": result.accuracy,
        "updates": result.updates,
        "gradients": result.gradients,
        "end_time": result.end_time,
        "end_updates": result.end_updates,
        "dropped": result.dropped,
        "time_to_80": hit[0] if hit else None,
        "updates_to_80": hit[1] if hit else None,
        "gradients_to_80": hit[2] if hit else None,
        "staleness_median": float(np.median(result.staleness)) if result.staleness else None,
        "overhead": result.overhead,
        "seconds_total": result.seconds_total,
    }


def tune_arm(
    arm: str, grid: tuple[float, ...], devices: int, budget: int, directory: Path
) -> dict[float, Any]:
    """One arm's rates on the tuning seed, largest first, each capped at the fewest gradients to 80% so
    far (a rate that has not reached 80% by then cannot win on the same fleet); cached per run."""
    outputs: dict[float, Any] = {}
    best = budget
    for lr in sorted(grid, reverse=True):
        run = Run(arm, lr, p.TUNE_SEED, devices, 0.8, best)
        output = cache.load(directory, run)
        if output is None:
            output = run_one(run)
            cache.store(directory, run, output)
        outputs[lr] = output
        if output["gradients_to_80"] is not None:
            best = min(best, int(output["gradients_to_80"]))
    return outputs


def best_rate(outputs: dict[float, Any]) -> float:
    """Least virtual time to 80%; runs that never reach it rank by their last accuracy."""

    def score(lr: float) -> tuple[float, float]:
        o = outputs[lr]
        return (o["time_to_80"] if o["time_to_80"] is not None else math.inf, -(o["accuracy"] or [0.0])[-1])

    return min(sorted(outputs), key=score)


def censored_at(outs: list[dict[str, Any]], field: str) -> dict[str, Any]:
    """Median over seeds of a 'to 80%' figure; a run that missed counts as where it stopped (censored)."""
    stop = {"time_to_80": "end_time", "updates_to_80": "end_updates", "gradients_to_80": "gradients"}
    caps = [o[stop[field]] for o in outs]
    return stats.censored_range([o[field] for o in outs], caps)


def table_for(outs: dict[tuple[str, int], Any], seeds: tuple[int, ...]) -> dict[str, Any]:
    table = {
        a: {
            "virtual_seconds_to_80": censored_at([outs[(a, s)] for s in seeds], "time_to_80"),
            "gradients_to_80": censored_at([outs[(a, s)] for s in seeds], "gradients_to_80"),
            "updates_to_80": censored_at([outs[(a, s)] for s in seeds], "updates_to_80"),
            "staleness_median": [outs[(a, s)]["staleness_median"] for s in seeds],
            "dropped": [outs[(a, s)]["dropped"] for s in seeds],
            "final_accuracy": [outs[(a, s)]["accuracy"][-1] for s in seeds],
        }
        for a in ARMS
    }
    base = table["adasgd"]["virtual_seconds_to_80"]
    # every arm's virtual time to 80% over AdaSGD's, per seed (censored runs at where they stopped)
    over_adasgd = {
        a: stats.paired(
            [outs[("adasgd", s)]["time_to_80"] for s in seeds],
            [outs[(a, s)]["time_to_80"] for s in seeds],
            base["per_seed"],
            table[a]["virtual_seconds_to_80"]["per_seed"],
            stats.ratio,
        )
        for a in ARMS
        if a != "adasgd"
    }
    return {
        "arms": table,
        "time_over_adasgd": over_adasgd,
        "ssgd_over_adasgd_time": over_adasgd["ssgd-wait-all"],
    }


@dataclass(frozen=True, kw_only=True)
class AsyncPlan(Plan):
    lr: float | None = None  # None: DynSGD's tuned rate from staleness.json (shared_lr)
    grid: tuple[float, ...] | None = p.LR_GRID  # None: tune over the shared rate alone
    seeds: tuple[int, ...] = (1, 2, 3)
    budget: int = BUDGET
    devices: int = 100
    workers: int | None = None  # None: FLEET_WORKERS; 1: tuning and runs in this process
    overhead_devices: int = 1000
    overhead_budget: int = 1000


FULL = AsyncPlan()
QUICK = AsyncPlan(
    quick=True, lr=0.1, grid=None, seeds=(1,), budget=120, devices=50, workers=1, overhead_devices=200,
    overhead_budget=30,
)  # fmt: skip


def run(plan: AsyncPlan, ctx: Context) -> Result:
    shared, lr_source = (plan.lr, "quick mode") if plan.lr is not None else shared_lr(ctx.results)
    seeds, budget, devices, directory = plan.seeds, plan.budget, plan.devices, ctx.cache
    grid = plan.grid or (shared,)
    with ctx.steps("tuning", len(TUNED)) as steps:
        if plan.workers == 1:
            tuning = {}
            for a in TUNED:
                tuning[a] = tune_arm(a, grid, devices, budget, directory)
                steps.advance()
        else:
            with ProcessPoolExecutor(plan.workers or int(os.environ.get("FLEET_WORKERS", "2"))) as pool:
                futures = {a: pool.submit(tune_arm, a, grid, devices, budget, directory) for a in TUNED}
                for future in futures.values():
                    future.add_done_callback(lambda _: steps.advance())
                tuning = {a: f.result() for a, f in futures.items()}
    tuned = {a: best_rate(t) for a, t in tuning.items()}
    _, default_rate = default_strategy()
    rates = {
        "a": {**dict.fromkeys(TUNED, shared), "default": default_rate},
        "b": {**tuned, "default": default_rate},
    }
    runs = {
        (proto, a, s): Run(a, rates[proto][a], s, devices, 0.8, budget)
        for proto in rates
        for a in ARMS
        for s in seeds
    }
    runner = p.Runner.of(ctx, plan.workers, work=run_one)
    done = runner.run(list(dict.fromkeys(runs.values())))
    tables = {
        proto: table_for({(a, s): done[runs[(proto, a, s)]] for a in ARMS for s in seeds}, seeds)
        for proto in rates
    }
    # Measured alone, after the pool has finished, so the share is not skewed by a sibling process.
    overhead = simulate(
        "adasgd", shared, 1, devices=plan.overhead_devices, target=math.inf, budget=plan.overhead_budget
    )
    summary = {
        "shared_lr": shared,
        "lr_source": lr_source,
        "tuned_lr": tuned,
        "default": {"strategy": default_strategy()[0], "learning_rate": default_rate},
        "tuning_seed": p.TUNE_SEED,
        "seeds": list(seeds),
        "devices": devices,
        "round": ROUND,
        "deadline_s": DEADLINE,
        "gradient_budget": budget,
        "tables": tables,
        "target_ratio": 3.0,
        "sim_overhead_1000_devices": {
            "share": overhead["overhead"],
            "gradients": overhead["gradients"],
            "seconds": overhead["seconds_total"],
        },
        "quick": plan.quick,
    }
    tuning_out = {
        a: {
            str(lr): {
                "time_to_80": o["time_to_80"],
                "gradients_to_80": o["gradients_to_80"],
                "final": o["accuracy"][-1],
                "gradients": o["gradients"],
            }
            for lr, o in t.items()
        }
        for a, t in tuning.items()
    }
    series = {f"{proto}/{a}/{s}": done[r] for (proto, a, s), r in runs.items()}
    return Result(summary, series=series, records={"tuning": tuning_out})


def plot(result: Result) -> Any:
    summary, seed = result.summary, result.summary["seeds"][0]
    fig, axes = figure(2)
    for ax, proto in zip(axes, ("a", "b"), strict=True):
        for a in ARMS:
            o = result.series[f"{proto}/{a}/{seed}"]
            lr = summary["default"]["learning_rate"] if a == "default" else (
                summary["shared_lr"] if proto == "a" else summary["tuned_lr"][a]
            )  # fmt: skip
            ax.plot(np.asarray(o["times"]) / 60, o["accuracy"], label=f"{a} (lr {lr})")
        title = "shared rate" if proto == "a" else "rates tuned per arm"
        ax.set(xlabel="virtual minutes", ylabel="test accuracy", title=f"({proto}) {title}, seed {seed}")
        ax.legend()
    return fig


def markdown(result: Result, plan: AsyncPlan) -> str:
    summary, tuning = result.summary, result.records["tuning"]
    lines = [
        f"# async-vs-sync: time to 80% on a heterogeneous fleet ({summary['devices']} devices, "
        "7.2x speed spread)",
        "",
        f"Seeds {summary['seeds']}; SSGD rounds of {ROUND}; production SSGD: 130% over-selection and a "
        f"{DEADLINE} s deadline; budget {summary['gradient_budget']} gradients per run; a run that does not "
        "reach 80% counts as where it stopped (censored; ≥ marks a median that is a lower bound, ~ a ratio "
        "with censored seeds). "
        f"(a) every arm at {summary['shared_lr']} ({summary['lr_source']}); (b) each arm at its rate "
        f"tuned on seed {summary['tuning_seed']} over {list(p.LR_GRID)} by virtual time to 80%: "
        f"{summary['tuned_lr']}. The default arm is Fleet's default strategy, "
        f"{summary.get('default', {}).get('strategy')}, at its own rate "
        f"{summary.get('default', {}).get('learning_rate')} in both protocols (untuned).",
    ]
    for proto, t in summary["tables"].items():
        lines += [
            "",
            f"## Protocol ({proto})",
            "",
            "| arm | virtual s to 80% | gradients to 80% | updates to 80% | median τ | final accuracy |",
            "|---|---|---|---|---|---|",
            *[
                f"| {a} | {fmt(r['virtual_seconds_to_80'])} | {fmt(r['gradients_to_80'])} | "
                f"{fmt(r['updates_to_80'])} | {r['staleness_median']} | {r['final_accuracy']} |"
                for a, r in t["arms"].items()
            ],
            "",
            "Virtual time to 80% over AdaSGD's, per seed: "
            + "; ".join(f"{a} {fmt(r, 2)}" for a, r in t["time_over_adasgd"].items())
            + " (target for SSGD waiting for all: ≥ 3).",
        ]
    lines += [
        "",
        "## Tuning (seed 1000): virtual s to 80% per rate",
        "",
        "| arm | " + " | ".join(str(lr) for lr in p.LR_GRID) + " |",
        "|---|" + "---|" * len(p.LR_GRID),
        *[
            f"| {a} | "
            + " | ".join(
                (
                    lambda o: (
                        "—" if o is None else ("—" if o["time_to_80"] is None else f"{o['time_to_80']:.0f}")
                    )
                )(t.get(str(lr)))
                for lr in p.LR_GRID
            )
            + " |"
            for a, t in tuning.items()
        ],
        "",
        f"Simulator overhead at 1,000 devices (all but gradient computation): "
        f"{100 * summary['sim_overhead_1000_devices']['share']:.1f}% over "
        f"{summary['sim_overhead_1000_devices']['gradients']} gradients (target ≤ 20%).",
    ]
    return "\n".join(lines)


EXPERIMENT = Experiment("async-vs-sync", QUICK, FULL, run, markdown, plot, title="issue 5")
