"""Thesis Fig. 3.9: class 0 only in stragglers. Every gradient of a device holding digit 0 has τ = 48.

D1 staleness for the rest; τ_thres fixed at D1's 12 for the run (so the injected long tail cannot
raise it); AdaSGD (staleness_cap on, boost_floor 0.1, boost_scope "all", samples-counted global
labels) vs DynSGD, (a) at one shared rate and (b) each at its rate tuned by `staleness`. Reported:
updates until class-0 recall reaches 50% (counted only once overall accuracy is above 50%), and the
CDF of applied weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.contract import Context, Experiment, Plan, Result
from lab.experiments import protocol as p
from lab.experiments import stats
from lab.experiments.shared_lr import shared_lr, tuned_lrs
from lab.render import figure, fmt

STRATEGIES = ("adasgd", "dynsgd")


@dataclass(frozen=True, kw_only=True)
class LongTailPlan(Plan):
    lr: float | None = None  # None: DynSGD's tuned rate from staleness.json (shared_lr)
    seeds: tuple[int, ...] = p.SEEDS
    cap: int = 3000
    workers: int | None = None
    protocol_b: bool = True  # also each strategy at its own rate tuned by `staleness`
    stop_recall: float | None = 0.5


FULL = LongTailPlan()
QUICK = LongTailPlan(quick=True, lr=0.2, seeds=(1,), cap=200, workers=1, protocol_b=False, stop_recall=None)


def run(plan: LongTailPlan, ctx: Context) -> Result:
    lr, lr_source = (plan.lr, "quick mode") if plan.lr is not None else shared_lr(ctx.results)
    seeds, cap = plan.seeds, plan.cap
    runner = p.Runner.of(ctx, plan.workers)
    tuned = tuned_lrs(ctx.results) if plan.protocol_b else None
    rates = {"a": dict.fromkeys(STRATEGIES, lr)}
    if tuned is not None:
        rates["b"] = {v: tuned[v] for v in STRATEGIES}

    def job(v: str, rate: float, s: int) -> p.Job:
        return p.Job(
            v,
            rate,
            s,
            "D1",
            cap=cap,
            stop_at_target=False,
            long_tail=(0, 48),
            tau_thres=12.0,
            recall_class=0,
            stop_recall=plan.stop_recall,
        )

    jobs = {(proto, v, s): job(v, r[v], s) for proto, r in rates.items() for v in STRATEGIES for s in seeds}
    done = runner.run(list(dict.fromkeys(jobs.values())))
    protocols = {}
    for proto, r in rates.items():
        at = {v: [done[jobs[(proto, v, s)]]["recall_50_at"] for s in seeds] for v in STRATEGIES}
        protocols[proto] = {
            "lr": r,
            "recall_50_updates": {v: stats.censored_range(at[v], cap) for v in STRATEGIES},
            "ratio_adasgd_over_dynsgd": stats.paired(at["dynsgd"], at["adasgd"], cap, cap, stats.ratio),
        }
    summary = {
        "lr": lr,
        "lr_source": lr_source,
        "seeds": list(seeds),
        "tau_thres": 12.0,
        "cap": cap,
        **{k: protocols["a"][k] for k in ("recall_50_updates", "ratio_adasgd_over_dynsgd")},
        "protocols": protocols,
        "target_ratio": 0.5,
        "quick": plan.quick,
    }
    out = {(v, s): done[jobs[("a", v, s)]] for v in STRATEGIES for s in seeds}
    first = {v: out[(v, seeds[0])] for v in STRATEGIES}
    series = {
        v: {
            "updates": o["updates"],
            "accuracy": o["accuracy"],
            "recall0": o["recall"],
            "weights": o["weights"],
            "staleness": o["staleness"],
        }
        for v, o in first.items()
    }
    return Result(summary, series=series)


def plot(result: Result) -> Any:
    fig, axes = figure(2)
    for v, s in result.series.items():
        axes[0].plot(s["updates"], s["recall0"], label=f"{v} class-0 recall")
        w = np.sort(np.asarray(s["weights"]))
        axes[1].plot(w, np.arange(1, len(w) + 1) / max(1, len(w)), label=v)
    lr = result.summary["lr"]
    axes[0].set(xlabel="model updates", ylabel="recall of digit 0", title=f"long tail, lr {lr}", ylim=(0, 1))
    axes[1].set(xlabel="applied weight", ylabel="CDF", xscale="log", title="applied weights")
    for ax in axes:
        ax.legend()
    return fig


def markdown(result: Result, plan: LongTailPlan) -> str:
    s = result.summary
    protocols = s["protocols"]
    return "\n".join(
        [
            "# long-tail: class 0 only in stragglers (τ = 48), D1 otherwise, τ_thres fixed at 12",
            "",
            f"(a) shared lr {s['lr']} ({s['lr_source']}); (b) each strategy at its rate tuned by `staleness`"
            f"{'' if 'b' not in protocols else ': ' + str(protocols['b']['lr'])}; seeds {s['seeds']}; "
            f"runs stop once both criteria hold; a run that does not meet them within {s['cap']:,} updates "
            "counts as the cap (censored; ≥ marks a median that is a lower bound, ~ a ratio with "
            "censored seeds).",
            "",
            "| protocol | strategy | lr | updates to class-0 recall ≥ 50% (acc ≥ 50%) |",
            "|---|---|---|---|",
            *[
                f"| ({proto}) | {v} | {t['lr'][v]} | {fmt(t['recall_50_updates'][v])} |"
                for proto, t in protocols.items()
                for v in STRATEGIES
            ],
            "",
            *[
                f"AdaSGD / DynSGD ratio, protocol ({proto}): {fmt(t['ratio_adasgd_over_dynsgd'], 2)} "
                "(target ≤ 0.5)."
                for proto, t in protocols.items()
            ],
        ]
    )


EXPERIMENT = Experiment("long-tail", QUICK, FULL, run, markdown, plot, title="Thesis Fig. 3.9")
