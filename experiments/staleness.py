"""Thesis Fig. 3.8: AdaSGD vs DynSGD vs FedAvg-async vs SSGD on non-IID MNIST under D1 and D2.

Table: updates to 80% test accuracy (median and range over 5 paired seeds) under protocol (a), one
shared learning rate (DynSGD's best), and (b), each strategy at its own rate tuned on seed 1000 with
D2; AdaSGD's saving over DynSGD = median of the per-seed savings. Protocol (b) also runs two AdaSGD
variants (applied-weight label counts; boost only for stragglers) and Fleet's default strategy at its
own rate, untuned (issue 19). Also used by `iid` (Fig. 3.10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments import protocol as p
from experiments import stats
from experiments.report import figure, fmt, save_figure, write_json, write_markdown
from server.strategies import default_strategy

MAIN = ("adasgd", "dynsgd", "fedavg-async", "ssgd")
EXTRA = ("adasgd-weighted", "adasgd-stragglers")
THESIS = {"D1": 14.4, "D2": 18.4}


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "grid": (0.2,),
            "seeds": (1,),
            "dists": ("D2",),
            "cap": 100,
            "extra": (),
            "default": True,
            "workers": 1,
            "round": 5,
        }
    return {
        "grid": p.LR_GRID,
        "seeds": p.SEEDS,
        "dists": ("D1", "D2"),
        "cap": 3000,
        "extra": EXTRA,
        "default": True,
        "round": p.SSGD_ROUND,
    }


def job(
    variant: str, lr: float, seed: int, dist: str, partition: str, cfg: dict[str, Any], quick: bool
) -> p.Job:
    return p.Job(
        variant,
        lr,
        seed,
        "none" if variant == "ssgd" else dist,
        partition,
        cfg["cap"],
        stop_at_target=not quick,
        ssgd_round=cfg["round"],
    )


def run(
    *,
    quick: bool,
    out_dir: Path,
    seed: int = 0,
    partition: str = "sorted",
    name: str = "staleness",
    dists: tuple[str, ...] | None = None,
) -> dict:
    cfg = plan(quick)
    if dists is not None:
        cfg["dists"] = dists
    runner = p.Runner(out_dir / "cache" / name, **({"workers": cfg["workers"]} if "workers" in cfg else {}))
    default, default_rate = default_strategy()
    untuned = (default,) if cfg.get("default") else ()
    variants = (*MAIN, *cfg["extra"], *untuned)
    tuning: dict[str, dict[float, dict[str, Any]]] = {}
    lrs: dict[str, float] = {default: default_rate}
    state: dict[str, Any] = {}
    # the main table first, the variants after (a long run may stop), the untuned default last
    for group in (MAIN, cfg["extra"], untuned):
        if not group:
            continue
        if len(cfg["grid"]) > 1 and group is not untuned:
            grids = {
                v: [job(v, lr, p.TUNE_SEED, "D2", partition, cfg, quick) for lr in cfg["grid"]] for v in group
            }
            tuning.update(p.tune(runner, grids))
        for v in group:
            if group is not untuned:
                lrs[v] = p.best_lr(tuning[v]) if v in tuning else cfg["grid"][0]
        shared = lrs["dynsgd"]
        for d in cfg["dists"]:  # one chunk per table, written as soon as it is complete
            for proto in ("a", "b"):
                runs = [
                    job(v, shared if proto == "a" else lrs[v], s, d, partition, cfg, quick)
                    for s in cfg["seeds"]
                    for v in group
                    if proto == "b" or v in MAIN
                ]
                state.update(runner.run(runs))
                result = summarise(state, cfg, lrs, tuning, variants, partition, quick)
                write_outputs(result, out_dir, name)
    return result


def summarise(
    outputs: dict[p.Job, dict[str, Any]],
    cfg: dict[str, Any],
    lrs: dict[str, float],
    tuning: dict[str, dict[float, dict[str, Any]]],
    variants: tuple[str, ...],
    partition: str,
    quick: bool,
) -> dict[str, Any]:
    shared = lrs["dynsgd"]
    by = {(j.variant, j.lr, j.seed, j.dist if j.variant != "ssgd" else None): o for j, o in outputs.items()}
    tables: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for dist in cfg["dists"]:
        for proto in ("a", "b"):
            rows: dict[str, Any] = {}
            per_seed: dict[str, list[int | None]] = {}
            for v in variants:
                if proto == "a" and v not in MAIN:
                    continue
                lr = shared if proto == "a" else lrs.get(v)
                if lr is None:  # a variant whose learning rate is not tuned yet (the run goes on)
                    continue
                found = [by.get((v, lr, s, dist if v != "ssgd" else None)) for s in cfg["seeds"]]
                if any(f is None for f in found):
                    continue
                per_seed[v] = [f["updates_to_80"] for f in found]
                rows[v] = {
                    "lr": lr,
                    "updates_to_80": stats.censored_range(per_seed[v], cfg["cap"]),
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
                    per_seed["dynsgd"], per_seed[v], cfg["cap"], cfg["cap"], stats.saving
                )
            tables[f"{dist}/{proto}"] = rows
    summary = {
        "tables": tables,
        "shared_lr": shared,
        "tuned_lr": {v: lr for v, lr in lrs.items() if v != summary_default(variants)},
        "thesis_saving_pct": THESIS,
        "seeds": list(cfg["seeds"]),
        "partition": partition,
        "quick": quick,
        "ssgd_round": cfg["round"],
        "cap": cfg["cap"],
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
    return {"summary": summary, "tuning": tuning_out, "series": series}


def summary_default(variants: tuple[str, ...]) -> str | None:
    """Fleet's default strategy when this run includes it (untuned, in protocol (b) only)."""
    default, _ = default_strategy()
    return default if default in variants else None


def write_outputs(result: dict[str, Any], out_dir: Path, name: str) -> None:
    summary = result["summary"]
    fig, axes = figure(len(result["series"]) and len({k.split("/")[0] for k in result["series"]}))
    dists = sorted({k.split("/")[0] for k in result["series"]})
    for ax, dist in zip(axes, dists, strict=False):
        for key, s in result["series"].items():
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
    save_figure(fig, out_dir, name)
    write_json(out_dir, name, result)
    write_markdown(out_dir, name, markdown(summary, name))


def markdown(summary: dict[str, Any], name: str) -> str:
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
