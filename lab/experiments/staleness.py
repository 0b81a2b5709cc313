"""Thesis Fig. 3.8: AdaSGD vs DynSGD vs FedAvg-async vs SSGD on non-IID MNIST under D1 and D2.

Table: updates to 80% test accuracy (median and range over 5 paired seeds) under protocol (a), one
shared learning rate (DynSGD's best), and (b), each strategy at its own rate tuned on seed 1000 with
D2; AdaSGD's saving over DynSGD = median of the per-seed savings. Protocol (b) also runs two AdaSGD
variants (applied-weight label counts; boost only for stragglers) and Fleet's default strategy at its
own rate, untuned (issue 19). Also used by `iid` (Fig. 3.10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.contract import Context, Experiment, Plan, Result
from lab.experiments import protocol as p
from lab.experiments import stats
from lab.render import figure, fmt
from server.strategies import default_strategy

MAIN = ("adasgd", "dynsgd", "fedavg-async", "ssgd")
EXTRA = ("adasgd-weighted", "adasgd-stragglers")
THESIS = {"D1": 14.4, "D2": 18.4}


@dataclass(frozen=True, kw_only=True)
class StalenessPlan(Plan):
    grid: tuple[float, ...] = p.LR_GRID
    seeds: tuple[int, ...] = p.SEEDS
    dists: tuple[str, ...] = ("D1", "D2")
    cap: int = 3000
    extra: tuple[str, ...] = EXTRA
    default: bool = True
    workers: int | None = None  # None: FLEET_WORKERS
    round: int = p.SSGD_ROUND
    partition: str = "sorted"
    stop_at_target: bool = True


FULL = StalenessPlan()
QUICK = StalenessPlan(
    quick=True,
    grid=(0.2,),
    seeds=(1,),
    dists=("D2",),
    cap=100,
    extra=(),
    workers=1,
    round=5,
    stop_at_target=False,
)


def job(variant: str, lr: float, seed: int, dist: str, plan: StalenessPlan) -> p.Job:
    return p.Job(
        variant,
        lr,
        seed,
        "none" if variant == "ssgd" else dist,
        plan.partition,
        plan.cap,
        stop_at_target=plan.stop_at_target,
        ssgd_round=plan.round,
    )


def run(plan: StalenessPlan, ctx: Context) -> Result:
    runner = p.Runner.of(ctx, plan.workers)
    default, default_rate = default_strategy()
    untuned = (default,) if plan.default else ()
    variants = (*MAIN, *plan.extra, *untuned)
    tuning: dict[str, dict[float, dict[str, Any]]] = {}
    lrs: dict[str, float] = {default: default_rate}
    state: dict[str, Any] = {}
    # the main table first, the variants after (a long run may stop), the untuned default last
    for group in (MAIN, plan.extra, untuned):
        if not group:
            continue
        if len(plan.grid) > 1 and group is not untuned:
            grids = {v: [job(v, lr, p.TUNE_SEED, "D2", plan) for lr in plan.grid] for v in group}
            tuning.update(p.tune(runner, grids))
        for v in group:
            if group is not untuned:
                lrs[v] = p.best_lr(tuning[v]) if v in tuning else plan.grid[0]
        shared = lrs["dynsgd"]
        for d in plan.dists:  # one chunk per table, written as soon as it is complete
            for proto in ("a", "b"):
                runs = [
                    job(v, shared if proto == "a" else lrs[v], s, d, plan)
                    for s in plan.seeds
                    for v in group
                    if proto == "b" or v in MAIN
                ]
                state.update(runner.run(runs))
                result = summarise(state, plan, lrs, tuning, variants)
                ctx.checkpoint(result)
    return result


def summarise(
    outputs: dict[p.Job, dict[str, Any]],
    plan: StalenessPlan,
    lrs: dict[str, float],
    tuning: dict[str, dict[float, dict[str, Any]]],
    variants: tuple[str, ...],
) -> Result:
    shared = lrs["dynsgd"]
    by = {(j.variant, j.lr, j.seed, j.dist if j.variant != "ssgd" else None): o for j, o in outputs.items()}
    tables: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for dist in plan.dists:
        for proto in ("a", "b"):
            rows: dict[str, Any] = {}
            per_seed: dict[str, list[int | None]] = {}
            for v in variants:
                if proto == "a" and v not in MAIN:
                    continue
                lr = shared if proto == "a" else lrs.get(v)
                if lr is None:  # a variant whose learning rate is not tuned yet (the run goes on)
                    continue
                found = [by.get((v, lr, s, dist if v != "ssgd" else None)) for s in plan.seeds]
                if any(f is None for f in found):
                    continue
                per_seed[v] = [f["updates_to_80"] for f in found]
                rows[v] = {
                    "lr": lr,
                    "updates_to_80": stats.censored_range(per_seed[v], plan.cap),
                    "per_seed": per_seed[v],
                    "status": [f["status"] for f in found],
                    "gradients": stats.median_range([f["gradients"] for f in found]),
                    "final_accuracy": [f["accuracy"][-1] for f in found],
                }
                series[f"{dist}/{proto}/{v}"] = {
                    "updates": found[0]["updates"],
                    "accuracy": found[0]["accuracy"],
                }
            for v in [x for x in rows if x.startswith("adasgd") or x == summary_default(variants)]:
                rows[v]["saving_over_dynsgd_pct"] = stats.paired(
                    per_seed["dynsgd"], per_seed[v], plan.cap, plan.cap, stats.saving
                )
            tables[f"{dist}/{proto}"] = rows
    summary = {
        "tables": tables,
        "shared_lr": shared,
        "tuned_lr": {v: lr for v, lr in lrs.items() if v != summary_default(variants)},
        "thesis_saving_pct": THESIS,
        "seeds": list(plan.seeds),
        "partition": plan.partition,
        "quick": plan.quick,
        "ssgd_round": plan.round,
        "cap": plan.cap,
        "adasgd_variants": {v: p.VARIANTS[v][1] for v in variants if v.startswith("adasgd")},
        "default": summary_default(variants),
    }
    tuning_out = {
        v: {
            str(lr): {"updates_to_80": o["updates_to_80"], "final": o["accuracy"][-1], "status": o["status"]}
            for lr, o in t.items()
        }
        for v, t in tuning.items()
    }
    return Result(summary, series=series, records={"tuning": tuning_out})


def summary_default(variants: tuple[str, ...]) -> str | None:
    """Fleet's default strategy when this run includes it (untuned, in protocol (b) only)."""
    default, _ = default_strategy()
    return default if default in variants else None


def plot(result: Result) -> Any:
    summary = result.summary
    dists = sorted({k.split("/")[0] for k in result.series})
    fig, axes = figure(len(dists))
    for ax, dist in zip(axes, dists, strict=False):
        for key, s in result.series.items():
            d, proto, v = key.split("/")
            if d == dist and proto == "a":
                ax.plot(s["updates"], s["accuracy"], label=v)
        ax.set(
            title=f"{dist}, shared lr {summary['shared_lr']} (seed {summary['seeds'][0]})",
            xlabel="model updates",
            ylabel="test accuracy",
            ylim=(0, 1),
        )
        ax.axhline(0.8, color="grey", lw=0.5)
        ax.legend()
    return fig


def markdown(result: Result, plan: StalenessPlan, name: str = "staleness") -> str:
    summary = result.summary
    lines = [
        f"# {name}: updates to 80% test accuracy ({summary['partition']} MNIST, 100 devices × 40 digits)",
        "",
        f"Seeds {summary['seeds']} (paired), batch 100 with replacement, K = 1, τ clipped to [0, 60], "
        f"eval every 20 updates, cap {summary['cap']:,} updates. "
        f"SSGD: rounds of {summary['ssgd_round']} gradients (τ = 0). "
        f"Learning rates tuned on seed {p.TUNE_SEED} with D2 over {list(p.LR_GRID)}: {summary['tuned_lr']}. "
        f"Protocol (a) shared rate = DynSGD's best = {summary['shared_lr']}. AdaSGD variants: "
        f"{summary['adasgd_variants']}. "
        + (
            f"Fleet's default, {summary['default']}, runs in protocol (b) at its own rate, untuned. "
            if summary.get("default")
            else ""
        )
        + "Cells: median (min–max) over seeds; runs stop at 80%; a run that "
        "does not reach 80% within the cap counts as the cap (censored; a median marked ≥ is a lower bound, "
        "a saving with censored seeds is uncertain)"
        + (" (quick mode: no tuning, small cap)." if summary["quick"] else "."),
        "",
    ]
    for key, rows in summary["tables"].items():
        dist, proto = key.split("/")
        lines += [
            f"## {dist}, protocol ({proto})",
            "",
            "| strategy | lr | updates to 80% | gradients | saving vs DynSGD % | statuses |",
            "|---|---|---|---|---|---|",
        ]
        for v, row in rows.items():
            save = row.get("saving_over_dynsgd_pct")
            thesis = f" (thesis {summary['thesis_saving_pct'].get(dist)})" if v == "adasgd" else ""
            name = f"{v} (Fleet's default, untuned)" if v == summary.get("default") else v
            lines.append(
                f"| {name} | {row['lr']} | {fmt(row['updates_to_80'])} | {fmt(row['gradients'])} | "
                f"{(fmt(save, 1) + thesis) if save else ''} | {', '.join(row['status'])} |"
            )
        lines.append("")
    return "\n".join(lines)


EXPERIMENT = Experiment("staleness", QUICK, FULL, run, markdown, plot, title="Thesis Fig. 3.8")
