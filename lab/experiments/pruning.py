"""Thesis Fig. 3.15: what the controller's thresholds cost. Batch sizes ~ N(100, 33).

A request is refused when its batch size is below the p-quantile of recent sizes (or its similarity
above the (1 − p)-quantile of recent similarities). Each run has the same budget of task requests
(the same time on the same fleet), AdaSGD under D1 at one shared rate, non-IID MNIST; the accuracy
loss is paired per seed against p = 0 at the end of the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.contract import Context, Experiment, Plan, Result
from lab.experiments import protocol as p
from lab.experiments import stats
from lab.experiments.shared_lr import shared_lr
from lab.render import figure, fmt

SIZE_DROPS = (0.0, 0.1, 0.2, 0.3, 0.392, 0.5)
SIMILARITY_DROPS = (0.1, 0.17, 0.3)


@dataclass(frozen=True, kw_only=True)
class PruningPlan(Plan):
    lr: float | None = None  # None: DynSGD's tuned rate from staleness.json (shared_lr)
    seeds: tuple[int, ...] = (1, 2, 3)
    budget: int = 1500  # task requests per run
    settings: tuple[tuple[str, float], ...] = (
        *(("size", d) for d in SIZE_DROPS),
        *(("similarity", d) for d in SIMILARITY_DROPS),
    )
    workers: int | None = None


FULL = PruningPlan()
QUICK = PruningPlan(
    quick=True, lr=0.2, seeds=(1,), budget=150, settings=(("size", 0.0), ("size", 0.392)), workers=1
)


def run(plan: PruningPlan, ctx: Context) -> Result:
    lr, lr_source = (plan.lr, "quick mode") if plan.lr is not None else shared_lr(ctx.results)
    seeds, budget, settings = plan.seeds, plan.budget, plan.settings

    def job(kind: str, drop: float, s: int) -> p.Job:
        return p.Job(
            "adasgd",
            lr,
            s,
            "D1",
            cap=10**6,
            stop_at_target=False,
            batch_std=33.0,
            max_requests=budget,
            size_drop=drop if kind == "size" else 0.0,
            similarity_drop=drop if kind == "similarity" else 0.0,
        )

    runner = p.Runner.of(ctx, plan.workers)
    jobs = {(k, d, s): job(k, d, s) for k, d in settings for s in seeds}
    done = runner.run(list(jobs.values()))
    rows = []
    for kind, drop in settings:
        outs = [done[jobs[(kind, drop, s)]] for s in seeds]
        base = [done[jobs[("size", 0.0, s)]]["accuracy"][-1] for s in seeds]
        rows.append(
            {
                "kind": kind,
                "p": drop,
                "fraction_dropped": stats.median_range([o["rejected"] / o["requests"] for o in outs]),
                "accuracy": stats.median_range([o["accuracy"][-1] for o in outs]),
                "accuracy_loss_points": stats.median_range(
                    [100 * (b - o["accuracy"][-1]) for b, o in zip(base, outs, strict=True)]
                ),
                "updates": stats.median_range([o["updates"][-1] for o in outs]),
            }
        )
    summary = {
        "lr": lr,
        "lr_source": lr_source,
        "seeds": list(seeds),
        "requests": budget,
        "rows": rows,
        "thesis": "drop 39.2% smallest L: < 2.2 points; drop 17% most similar: 4.8",
        "quick": plan.quick,
    }
    runs = {f"{k}/{d}/{s}": done[j]["accuracy"] for (k, d, s), j in jobs.items()}
    return Result(summary, records={"runs": runs})


def plot(result: Result) -> Any:
    rows = result.summary["rows"]
    fig, axes = figure(1)
    for kind in ("size", "similarity"):
        pts = [
            (r["fraction_dropped"]["median"], r["accuracy_loss_points"]["median"])
            for r in rows
            if r["kind"] == kind or r["p"] == 0.0
        ]
        if len(pts) > 1:
            axes[0].plot(*zip(*sorted(pts), strict=True), marker="o", label=f"drop by {kind}")
    axes[0].set(
        xlabel="fraction of gradients dropped",
        ylabel="accuracy loss (points)",
        title=f"pruning, AdaSGD D1, {result.summary['requests']} requests",
    )
    axes[0].legend()
    return fig


def markdown(result: Result, plan: PruningPlan) -> str:
    s = result.summary
    return "\n".join(
        [
            "# pruning: accuracy lost against gradients dropped (batch ~ N(100, 33), AdaSGD, D1)",
            "",
            f"lr {s['lr']} ({s['lr_source']}); seeds {s['seeds']}; {s['requests']} task requests per run; "
            "loss paired per seed against p = 0. Thesis: " + s["thesis"] + ".",
            "",
            "| threshold | p | fraction dropped | final accuracy | loss (points) | updates |",
            "|---|---|---|---|---|---|",
            *[
                f"| {r['kind']} | {r['p']} | {fmt(r['fraction_dropped'], 3)} | {fmt(r['accuracy'], 3)} | "
                f"{fmt(r['accuracy_loss_points'], 1)} | {fmt(r['updates'])} |"
                for r in s["rows"]
            ],
        ]
    )


EXPERIMENT = Experiment("pruning", QUICK, FULL, run, markdown, plot, title="Thesis Fig. 3.15")
