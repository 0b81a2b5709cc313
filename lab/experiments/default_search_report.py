"""The default-search report: the figure and the markdown, from the experiment's summary.

Kept apart from experiments/default_search.py, whose code is part of the cached runs' key: a change to
how results are drawn does not invalidate the runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.render import figure

CHECK_NAMES = {
    "reaches_target": "reaches the target",
    "within_1.1x": "≤ 1.1× the best tuned time",
    "final_within_0.5": "final within 0.5 points of the best",
    "no_divergence_x0.25_to_x4": "no divergence from ×0.25 to ×4",
    "within_1.1x_tuned_elsewhere": "≤ 1.1× a configuration tuned on the other seeds (mean over the seeds)",
    "final_within_0.5_tuned_elsewhere": "final within 0.5 points of one tuned on the other seeds (mean)",
    "reaches_target_fresh_seeds": "reaches the target on fresh seeds",
    "within_1.1x_fresh_seeds": "≤ 1.1× the fastest tuned configuration, both on fresh seeds",
    "final_within_0.5_fresh_seeds": "final within 0.5 points of the highest-ending tuned configuration, both "
    "on fresh seeds",
}


def _time(run: dict[str, Any]) -> str:
    if run["diverged"]:
        return "diverged"
    return f"{run['time']:.1f}" if run["time"] is not None else f"> {run['end_time']:.0f} (missed)"


def _ratio(run: dict[str, Any]) -> str:
    return f"{run['ratio']:.2f}×" if run["ratio"] is not None else "—"


def rates_text(rate: float | dict[str, float], caps: dict[str, float] | None = None) -> str:
    """γ = 0.3, or each model's own: γ = 0.3 (mnist_cnn), 0.4 (mlp), 0.6 (logreg); and the step caps:
    ‖Δθ‖ ≤ 0.03‖θ‖ (mlp)."""
    text = f"γ = {rate}"
    if isinstance(rate, dict):
        text = "γ = " + ", ".join(f"{r} ({model})" for model, r in rate.items())
    if caps:
        text += "; step ‖Δθ‖ ≤ " + ", ".join(f"{c}‖θ‖ ({model})" for model, c in caps.items())
    return text


def _seed_finals(run: dict[str, Any]) -> str:
    """Each seed's final accuracy, when a run was on several."""
    finals = run.get("finals")
    return f" ({' / '.join(f'{f:.3f}' for f in finals)})" if finals else ""


def _seeds(summary: dict[str, Any]) -> str:
    """Which simulator seeds each half ran on (one, before the seventh search)."""
    seeds = summary.get("seeds")
    if not seeds:
        return "one seed"
    if not summary["choice_workloads"]:
        return (
            f"seeds {', '.join(map(str, seeds['held_back']))} (a configuration reaches a target when most of "
            "its seeds do, at their median time)"
        )
    return (
        f"seed {', '.join(map(str, seeds['choice']))} on the choice half and "
        f"{', '.join(map(str, seeds['held_back']))} on the held-back half (a configuration reaches a target "
        "when most of its seeds do, at their median time)"
    )


def _cross_seed(held: dict[str, Any]) -> list[str]:
    """Each workload's default against a configuration tuned on the other seeds, on the seed left out."""
    if not any("cross_seed" in h for h in held.values()):
        return []
    lines = [
        "",
        "The best tuned run above is the best of every configuration on the very seeds it is reported on, an "
        "optimistic bar (picking the fastest of ten noisy runs picks luck too). Below, for each seed, the "
        "configuration and the target are judged on the other seeds, and the default is timed against that "
        "configuration on the seed left out (the standard of tuning on seeds one does not report):",
        "",
        "| workload | tuned on the other seeds (γ), per seed left out | default's ratio per seed | mean "
        "| final gap per seed (points) | mean |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for wl, h in held.items():
        c = h.get("cross_seed")
        if c is None:
            continue
        tuned = " / ".join(f["tuned"] for f in c["folds"])
        ratios = " / ".join(f"{f['ratio']:.2f}" for f in c["folds"])
        gaps = " / ".join(f"{100 * f['final_gap']:.1f}" for f in c["folds"])
        lines.append(
            f"| {wl} | {tuned} | {ratios} | {c['ratio']:.2f}× | {gaps} | {100 * c['final_gap']:.1f} |"
        )
    return lines


def _reached(run: dict[str, Any]) -> str:
    return f"{run['time']:.1f}" if run["reached"] else "missed"


def _fresh_seeds(held: dict[str, Any], seeds: list[int]) -> list[str]:
    """Each workload's default and the configurations tuned on the reported seeds, run again on fresh ones."""
    if not any("fresh_seeds" in h for h in held.values()):
        return []
    lines = [
        "",
        "Leaving one seed out at a time judges on a single run. Below, the configurations tuned on the "
        "reported seeds (the fastest to the target, and the one ending highest) and the default are all run "
        f"again on seeds {', '.join(map(str, seeds))}, which no configuration was judged on; the target is "
        "the reported seeds' (median times, mean finals, a target missed by most seeds counted as missed):",
        "",
        "| workload | fastest tuned (γ) | its s | default s | ratio | highest-ending tuned | its final "
        "| default final | gap (points) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for wl, h in held.items():
        f = h.get("fresh_seeds")
        if f is None:
            continue
        high = f["default"]["final"] + f["final_gap"]
        ratio = "—" if f["ratio"] is None else f"{f['ratio']:.2f}×"
        lines.append(
            f"| {wl} | {f['tuned']} | {_reached(f['fastest'])} | {_reached(f['default'])} | {ratio} "
            f"| {f['highest']} | {high:.3f} | {f['default']['final']:.3f} | {100 * f['final_gap']:.1f} |"
        )
    return lines


def markdown(summary: dict[str, Any], name: str) -> str:
    default, rate = summary["default"], rates_text(summary["default_rate"], summary.get("default_max_step"))
    held = summary["held_back"]
    passed = summary["passed"]
    lines = [
        "# Choosing the default strategy on workloads it was not tuned on (issue 28)",
        "",
        "`python -m lab run default-search` (or `fleet experiment default-search`): the suite of "
        "sim/workloads.py in the simulator (real ONNX gradients, virtual seconds, always-online devices at "
        f"fixed speeds), {_seeds(summary)}. A workload's target is the best final accuracy any "
        "configuration reached on it (mean of the last 5 evaluations, and of its seeds) less 1 point. The "
        "baselines' rates are tuned on the reported runs themselves (the best of their grid: an oracle, so "
        "the ratios below are strict). The candidates for the default were compared on the choice half "
        "only; the shipped default is reported on the held-back "
        f"half, which the choice never saw. Figure: [{name}.png]({name}.png).",
        "",
        f"**Shipped default: {default}, {rate}** "
        + (
            f"(the choice half picked {summary['chosen']})."
            if summary["choice"]
            else f"({summary['chosen']}: no choice this time, the shipped default checked on a fresh half)."
        ),
        "",
        *_redrawn(summary),
        "",
        "## Held-back workloads: the untuned default against the best tuned run",
        "",
        "| workload | target | best tuned (γ) | its s to target | default s to target | ratio | best final "
        "| default final | rate ×0.25 … ×4 (final accuracy) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for wl, h in held.items():
        best, own = h["best"], h["default"]
        curve = " / ".join(
            "div" if p["diverged"] else f"{p['final']:.3f}" for _, p in sorted(h["rate_curve"].items(),
                                                                               key=lambda kv: float(kv[0]))
        )  # fmt: skip
        lines.append(
            f"| {wl} | {h['target']:.3f} | {best['arm']} ({best['lr']}) | {best['time']:.1f} | {_time(own)} "
            f"| {_ratio(own)} | {h['best_final']:.3f} | {own['final']:.3f}{_seed_finals(own)} | {curve} |"
        )
    lines += _cross_seed(held)
    lines += _fresh_seeds(held, summary.get("seeds", {}).get("fresh", []))
    lines += ["", "Checks on the held-back half (workloads passing, of " + str(len(held)) + "):", ""]
    lines += [f"- {CHECK_NAMES[c]}: {passed[c]}" for c in CHECK_NAMES if c in passed]
    dead = {wl: collapses(h) for wl, h in held.items()}
    lines.append(
        f"- no run ending at chance level (final ≤ {CHANCE}) from ×0.25 to ×4: "
        f"{sum(not d for d in dead.values())}"
        + "".join(f"; {wl} at ×{', ×'.join(d)}" for wl, d in dead.items() if d)
    )
    if summary["choice"]:
        lines += [
            "",
            "## Choice half: the candidates' time to each workload's target over the "
            + (
                "faster candidate's (head to head: no baseline ran on the choice half, so a target is the "
                "better candidate's final less 1 point)"
                if _head_to_head(summary)
                else "best tuned run's"
            ),
            "",
            "| candidate | failing a check (target, 1.1×, 0.5 points) | targets missed "
            "| worst ratio (over those reached) | mean ratio |",
            "| --- | --- | --- | --- | --- |",
        ]
    of = len(summary["choice_workloads"])
    for cand, c in summary["choice"].items():
        worst = "—" if c["worst"] is None else f"{c['worst']:.2f}×"
        mean = "—" if c["mean"] is None else f"{c['mean']:.2f}×"
        mark = " (chosen)" if cand == summary["chosen"] else ""
        failed = f"{c['failed']} of {of}" if "failed" in c else "not counted"
        lines.append(f"| {cand}{mark} | {failed} | {c['missed']} of {of} | {worst} | {mean} |")
    lines += ["", "## Every run: final accuracy (time to the workload's target, ratio to the best)", ""]
    for wl, j in summary["judged"].items():
        half = "choice" if wl in summary["choice_workloads"] else "held back"
        cells = ", ".join(f"{cfg} {r['final']:.3f} ({_time(r)}, {_ratio(r)})" for cfg, r in j["runs"].items())
        lines.append(f"- **{wl}** ({half}, target {j['target']:.3f}): {cells}")
    return "\n".join(lines) + "\n"


def _head_to_head(summary: dict[str, Any]) -> bool:
    """Whether the choice half ran the candidates alone (the eleventh search), with no baseline."""
    candidates = len(summary["choice"])
    return all(len(summary["judged"][wl]["runs"]) == candidates for wl in summary["choice_workloads"])


def _redrawn(summary: dict[str, Any]) -> list[str]:
    """Where the workloads come from: each earlier held-back half, reported once, is chosen on since."""
    seen = len(summary["choice_workloads"])
    chose = (
        f"This search chose on {seen} of them ({', '.join(summary['choice_workloads'])})."
        if seen
        else "This run chose nothing: it checks the shipped default."
    )
    return [
        "Each earlier search's held-back half was reported once and then joined the workloads a default may "
        "be chosen on (sim/workload_halves.py; what each showed and what the next search chose from it: "
        f"[default-history.md](../default-history.md)). {chose} The held-back half below is a fresh one, "
        "drawn before any run on it.",
        "",
    ]


CHANCE = 0.15  # a final accuracy at or below this (10 classes: chance is 0.1) is a dead model


def collapses(held: dict[str, Any]) -> list[str]:
    """The rate factors at which the default ended at chance level (the recorded check counts only runs
    flagged diverged: a NaN, or ten identical evaluations at chance; these may wobble at 0.09-0.10)."""
    curve = held["rate_curve"]
    return [f"{float(f):g}" for f, p in curve.items() if p["diverged"] or p["final"] <= CHANCE]


def plot(summary: dict[str, Any], cause: dict[str, dict[str, Any]]) -> Any:
    fig, axes = figure(4, width=4.2, height=3.6)
    ax_recall, ax_clip, ax_step, ax_held = axes
    for i, (arm, output) in enumerate(cause.items()):
        c = output.get("cause")
        if not c:
            continue
        recall = np.array(c["recall"]) if c["recall"] else np.zeros((0, 10))
        times = c["times"][-len(recall) :] if len(recall) else []
        devices = c["devices"]
        slow = sorted({lab for d in devices[-2:] for lab in d["labels"]})  # the slowest devices' digits
        others = [k for k in range(recall.shape[1]) if k not in slow] if len(recall) else []
        if len(recall):
            ax_recall.plot(times, recall[:, slow].mean(axis=1), color=f"C{i}", lw=2,
                           label=f"{arm}: digits {slow} (slowest devices)")  # fmt: skip
            ax_recall.plot(
                times, recall[:, others].mean(axis=1), color=f"C{i}", ls=":", label=f"{arm}: the rest"
            )
        x = np.arange(len(devices))
        ax_clip.plot(x, [d["clip_ratio"] or np.nan for d in devices], "o-", color=f"C{i}", label=arm)
        total = sum(d["step"] for d in devices) or 1.0
        ax_step.plot(x, [d["step"] / total for d in devices], "o-", color=f"C{i}", label=arm)
        ax_clip.set_xticks(x, ["".join(map(str, d["labels"])) for d in devices], fontsize=6, rotation=90)
        ax_step.set_xticks(x, ["".join(map(str, d["labels"])) for d in devices], fontsize=6, rotation=90)
    ax_recall.set(xlabel="virtual seconds", ylabel="mean recall", ylim=(0, 1), title="per-class recall")
    ax_recall.legend(fontsize=6)
    ax_clip.set(xlabel="device (fastest first), its digits", ylabel="kept / raw norm", title="clip ratio")
    ax_clip.legend(fontsize=6)
    ax_step.set(
        xlabel="device (fastest first), its digits", ylabel="share of all steps", title="applied step"
    )
    ax_step.legend(fontsize=6)
    held = summary["held_back"]
    names = list(held)
    ratios = [h["default"]["ratio"] if h["default"]["ratio"] is not None else np.nan for h in held.values()]
    ax_held.barh(names, ratios, color="C1")
    for y, ratio in enumerate(ratios):
        if np.isnan(ratio):  # the target was never reached: no bar, a mark
            ax_held.text(0.02, y, "missed the target", va="center", fontsize=7, color="C3")
    ax_held.axvline(1.1, color="k", lw=0.8, ls=":")
    ax_held.set(xlabel="default's time to target / best tuned", title="held-back workloads")
    ax_held.tick_params(axis="y", labelsize=6)
    return fig
