"""Issue 19, part 1: why AdaSGD needs 3-5x DynSGD's gradients on the peer workload, and when it diverges.

Records every gradient AdaSGD and DynSGD receive on the simulated peer workload (20 devices, 2 sorted
shards each, speeds spread 7x): its staleness τ, its label similarity to the global distribution
(Bhattacharyya coefficient, the boost's input), its norm and the weight applied. Figures: weight
against τ (AdaSGD's Λ(τ)/max(0.1, BC) against DynSGD's 1/(τ+1)), the similarity histogram, and the
distribution of the effective step γ·w, each strategy at its own tuned rate and AdaSGD at the rate that
diverges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.contract import Context, Experiment, Plan, Result
from lab.experiments.peer_fleets import WORKLOADS, Run, simulator
from lab.render import figure
from server.strategies.base import Arrival
from server.strategies.wrappers import StrategyWrapper

SEED = 1
# (strategy, rate, label): each at its best rate on the tuning seed, and AdaSGD at twice its best
ARMS = (
    ("adasgd", 0.05, "AdaSGD γ=0.05 (tuned)"),
    ("dynsgd", 0.2, "DynSGD γ=0.2 (tuned)"),
    ("adasgd", 0.1, "AdaSGD γ=0.1"),
    ("adasgd", 0.2, "AdaSGD γ=0.2 (DynSGD's rate)"),
)


READING = (
    "Reading: every 2-label mini-batch has about the same similarity to the global label mix (median BC "
    "{similarity_median:.2f}), so the boost 1/max(0.1, BC) is not selective: it multiplies almost every "
    "gradient by ~{boost_median:.1f}, a hidden learning-rate multiplier. Λ(τ) = exp(−β·τ) is steeper than "
    "1/(τ+1): it gives the fresh gradients of the fastest devices several times DynSGD's weight and the slow "
    "devices' stale ones less (left panel), so the effective steps γ·w spread over two decades instead of "
    "DynSGD's narrow band (right). Per gradient AdaSGD applies {weight_vs_dynsgd:.1f}x DynSGD's weight on "
    "average, so its best rate is 2-4x smaller, and the largest steps, from few fast devices holding few "
    "labels, are the ones that make it diverge at rates DynSGD still handles "
    "(docs/results/default-search.md)."
)


class Recorder(StrategyWrapper):
    """Keeps (τ, similarity, ‖G‖, weight) for every gradient the wrapped strategy weighs."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.rows: list[tuple[int, float, float, float]] = []

    def receive(self, arrival: Arrival) -> float:
        similarity = getattr(self.inner, "similarity", None)
        bc = similarity(arrival.label_counts) if similarity else None
        weight = self.inner.receive(arrival)
        norm = float(np.linalg.norm(arrival.gradient))
        self.rows.append((arrival.staleness, np.nan if bc is None else bc, norm, weight))
        return weight


def record(name: str, lr: float, cap: int) -> dict[str, Any]:
    from lab.experiments.peer_fleets import candidates

    build, _ = candidates()[name]
    recorders: list[Recorder] = []

    def factory() -> Recorder:
        recorders.append(Recorder(build(lr)))
        return recorders[-1]

    run = Run(name, lr, "peer-20", SEED)
    result = simulator(run, factory).run(max_gradients=cap, target=WORKLOADS["peer-20"].target)
    rows = np.array(recorders[-1].rows, dtype=float)
    hit = result.first_time_at(0.9)
    return {
        "strategy": name,
        "lr": lr,
        "gradients_to_90": hit[2] if hit else None,
        "diverged": result.diverged,
        "final_accuracy": result.accuracy[-1],
        "tau": rows[:, 0].tolist(),
        "similarity": rows[:, 1].tolist(),
        "norm": rows[:, 2].tolist(),
        "weight": rows[:, 3].tolist(),
        "curve": [result.gradients_at_eval, result.accuracy],
    }


def summarize(arm: dict[str, Any]) -> dict[str, Any]:
    w, tau, sim = (np.asarray(arm[k], float) for k in ("weight", "tau", "similarity"))
    step = arm["lr"] * w
    late = slice(min(100, len(w)), None)  # after AdaSGD's bootstrap of 100 staleness values
    return {
        "strategy": arm["strategy"],
        "lr": arm["lr"],
        "gradients_to_90": arm["gradients_to_90"],
        "diverged": arm["diverged"],
        "weight_mean": float(w[late].mean()),
        "weight_vs_dynsgd": float((w[late] * (tau[late] + 1)).mean()),  # w / (1/(τ+1)), per gradient
        "step_mean": float(step[late].mean()),
        "step_p90": float(np.percentile(step[late], 90)),
        "similarity_median": float(np.nanmedian(sim)) if np.isfinite(sim).any() else None,
        "boost_median": float(np.nanmedian(1 / np.maximum(0.1, sim))) if np.isfinite(sim).any() else None,
        "tau_p50": float(np.median(tau)),
        "tau_p99": float(np.percentile(tau, 99)),
        "norm_p50": float(np.median(arm["norm"])),
        "norm_max": float(np.max(arm["norm"])),
    }


@dataclass(frozen=True, kw_only=True)
class WhyPlan(Plan):
    cap: int = 9000
    arms: int = len(ARMS)  # the first ``arms`` of ARMS


FULL = WhyPlan()
QUICK = WhyPlan(quick=True, cap=400, arms=2)


def run(plan: WhyPlan, ctx: Context) -> Result:
    arms = [record(name, lr, plan.cap) for name, lr, _ in ctx.track(ARMS[: plan.arms], "arms")]
    rows = [summarize(a) for a in arms]
    return Result({"quick": plan.quick, "arms": rows}, records={"arms": arms})


def plot(result: Result) -> Any:
    arms = result.records["arms"]
    fig, (ax_w, ax_s, ax_step) = figure(3, width=5.0)
    taus = np.arange(0, 60)
    ax_w.plot(taus, 1 / (taus + 1), "k--", label="DynSGD 1/(τ+1)")
    for arm, (_, _, label) in zip(arms, ARMS, strict=False):
        tau, w = np.asarray(arm["tau"]), np.asarray(arm["weight"])
        if arm["strategy"] == "adasgd" and arm is arms[0]:
            ax_w.scatter(
                tau + np.random.default_rng(0).uniform(-0.3, 0.3, len(tau)),
                w,
                s=2,
                alpha=0.2,
                label="AdaSGD applied w",
            )
            sim = np.asarray(arm["similarity"])
            ax_s.hist(sim[np.isfinite(sim)], bins=40, color="C0")
        ax_step.hist(arm["lr"] * w, bins=np.geomspace(1e-4, 1, 50), histtype="step", label=label)
    ax_w.set(xlabel="staleness τ", ylabel="applied weight w", yscale="log", title="weights by staleness")
    ax_w.legend(fontsize=7)
    ax_s.set(
        xlabel="label similarity BC to the global distribution",
        ylabel="gradients",
        title="AdaSGD's similarity (boost = 1/max(0.1, BC))",
    )
    ax_step.set(xscale="log", xlabel="effective step γ·w", ylabel="gradients", title="effective steps")
    ax_step.legend(fontsize=7)
    return fig


def markdown(result: Result, plan: WhyPlan) -> str:
    rows, name = result.summary["arms"], "adasgd-why-quick" if plan.quick else "adasgd-why"
    lines = [
        "# What AdaSGD's weights do on the peer workload",
        "",
        "Simulated peer workload (20 devices, 2 sorted shards of MNIST each, speeds spread 7x), "
        f"seed {SEED}; every gradient recorded. `python -m lab run adasgd-why`. "
        f"Figure: [{name}.png]({name}.png).",
        "",
        "| strategy | γ | gradients to 90% | mean w | mean w·(τ+1) | mean γ·w | p90 γ·w | median BC "
        "| median boost | τ p50 / p99 | ‖G‖ p50 / max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        reached = "diverged" if r["diverged"] else (r["gradients_to_90"] or "not reached")
        bc = "-" if r["similarity_median"] is None else f"{r['similarity_median']:.2f}"
        boost = "-" if r["boost_median"] is None else f"{r['boost_median']:.2f}"
        cells = [
            r["strategy"],
            r["lr"],
            reached,
            f"{r['weight_mean']:.3f}",
            f"{r['weight_vs_dynsgd']:.2f}",
            f"{r['step_mean']:.4f}",
            f"{r['step_p90']:.4f}",
            bc,
            boost,
            f"{r['tau_p50']:.0f} / {r['tau_p99']:.0f}",
            f"{r['norm_p50']:.2f} / {r['norm_max']:.2f}",
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    ada = next((r for r in rows if r["strategy"] == "adasgd"), None)
    if ada is not None and ada["boost_median"] is not None:
        lines += ["", READING.format(**ada)]
    return "\n".join(lines)


EXPERIMENT = Experiment("adasgd-why", QUICK, FULL, run, markdown, plot, title="AdaSGD's weights")
