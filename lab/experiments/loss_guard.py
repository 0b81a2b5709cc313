"""Issue 19: can a rate set too high back off instead of diverging? DynSGDClip with and without
``LossGuard`` (server/strategies/guard.py) over a range of rates, on the simulated peer workload.

The same fleets as `python -m lab run default-search` (20 devices × 2 label-sorted shards, speeds spread
7x, real ONNX gradients of the thesis CNN): virtual seconds to 90% test accuracy at each rate, on the
tuning seed and on the three report seeds. A miss is censored at the cap and a collapse is marked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.contract import Context, Experiment, Plan, Result
from lab.experiments.peer_fleets import REPORT_SEEDS, TUNE_SEED, WORKLOADS, Run, collapsed, simulator
from lab.render import figure

RATES = (0.2, 0.4, 0.8, 1.6, 3.2, 6.4)


def arm(guarded: bool, rate: float, workload: str, seed: int) -> dict[str, Any]:
    from server.strategies import DynSGDClip
    from server.strategies.guard import LossGuard

    def build() -> Any:
        strategy = DynSGDClip(learning_rate=rate)
        return LossGuard(strategy) if guarded else strategy

    w = WORKLOADS[workload]
    sim = simulator(Run("dynsgd-clip", rate, workload, seed), build)
    result = sim.run(max_gradients=w.cap, target=w.target, give_up=collapsed)
    hit = result.first_time_at(w.target)
    return {
        "guard": guarded,
        "rate": rate,
        "seed": seed,
        "time_to_target": hit[0] if hit else None,
        "gradients_to_target": hit[2] if hit else None,
        "end_time": result.end_time,
        "diverged": bool(result.diverged or collapsed(result)),
        "final_accuracy": result.accuracy[-1] if result.accuracy else None,
    }


@dataclass(frozen=True, kw_only=True)
class GuardPlan(Plan):
    workload: str = "peer-20"
    rates: tuple[float, ...] = RATES
    seeds: tuple[int, ...] = (TUNE_SEED, *REPORT_SEEDS)


FULL = GuardPlan()
QUICK = GuardPlan(quick=True, workload="quick-20", rates=(0.8, 3.2), seeds=(TUNE_SEED,))


def run(plan: GuardPlan, ctx: Context) -> Result:
    workload, rates, seeds = plan.workload, plan.rates, plan.seeds
    todo = [(g, r, s) for s in seeds for r in rates for g in (False, True)]
    rows = [arm(g, r, workload, s) for g, r, s in ctx.track(todo, "runs")]
    summary = {"workload": workload, "seeds": list(seeds), "rates": list(rates), "table": table(rows, rates)}
    return Result(summary, records={"runs": rows})


def _cell(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median virtual seconds to target over seeds, a miss counted at its end time (censored)."""
    times = [r["time_to_target"] if r["time_to_target"] is not None else np.inf for r in runs]
    return {
        "median_s": float(np.median(times)),
        "reached": sum(r["time_to_target"] is not None for r in runs),
        "collapsed": sum(r["diverged"] for r in runs),
        "runs": len(runs),
    }


def table(rows: list[dict[str, Any]], rates: tuple[float, ...]) -> list[dict[str, Any]]:
    return [
        {
            "rate": rate,
            "guard": guard,
            **_cell([r for r in rows if r["rate"] == rate and r["guard"] == guard]),
        }
        for rate in rates
        for guard in (False, True)
    ]


def markdown(result: Result, plan: GuardPlan) -> str:
    summary, name = result.summary, "loss-guard-quick" if plan.quick else "loss-guard"
    lines = [
        "# LossGuard: backing off a rate set too high",
        "",
        "`python -m lab run loss-guard`: DynSGDClip alone and wrapped in LossGuard (halve the rate when the",
        f"devices' loss average climbs 1.5x above its low), workload `{summary['workload']}`, data seeds",
        f"{summary['seeds']} ({TUNE_SEED} is the tuning seed). Median virtual seconds to 90% over the seeds",
        "(∞: the median run missed 90% within the cap or collapsed).",
        "",
        "| rate | DynSGDClip | reached / collapsed | + LossGuard | reached / collapsed |",
        "|---|---|---|---|---|",
    ]
    by = {(c["rate"], c["guard"]): c for c in summary["table"]}
    for rate in summary["rates"]:
        plain, guarded = by[(rate, False)], by[(rate, True)]
        lines.append(
            f"| {rate} | {plain['median_s']:.1f} | {plain['reached']}/{plain['runs']} · {plain['collapsed']} "
            f"| {guarded['median_s']:.1f} | {guarded['reached']}/{guarded['runs']} · {guarded['collapsed']} |"
        )
    lines += ["", f"![time to 90% against the rate]({name}.png)"]
    return "\n".join(lines)


def plot(result: Result) -> Any:
    rows, rates, name = result.records["runs"], result.summary["rates"], "loss-guard"
    fig, (ax,) = figure(1, width=6.0)
    for guard, label in ((False, "DynSGDClip"), (True, "DynSGDClip + LossGuard")):
        medians = [
            _cell([r for r in rows if r["rate"] == x and r["guard"] == guard])["median_s"] for x in rates
        ]
        cap = max(r["end_time"] for r in rows)
        ax.plot(rates, [m if np.isfinite(m) else cap for m in medians], "o-", label=label)
    ax.set(xscale="log", xlabel="learning rate γ", ylabel="virtual s to 90% (cap = miss)", title=name)
    ax.legend()
    return fig


EXPERIMENT = Experiment("loss-guard", QUICK, FULL, run, markdown, plot, title="LossGuard")
