"""Thesis Fig. 3.15: what the controller's thresholds cost. Batch sizes ~ N(100, 33).

A request is refused when its batch size is below the p-quantile of recent sizes (or its similarity
above the (1 − p)-quantile of recent similarities). Each run has the same budget of task requests
(the same time on the same fleet), AdaSGD under D1 at one shared rate, non-IID MNIST; the accuracy
loss is paired per seed against p = 0 at the end of the budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments import protocol as p
from experiments import stats
from experiments.report import figure, fmt, save_figure, write_json, write_markdown
from experiments.shared_lr import shared_lr

SIZE_DROPS = (0.0, 0.1, 0.2, 0.3, 0.392, 0.5)
SIMILARITY_DROPS = (0.1, 0.17, 0.3)


def run(*, quick: bool, out_dir: Path, seed: int = 0) -> dict[str, Any]:
    lr, lr_source = (0.2, "quick mode") if quick else shared_lr(out_dir)
    seeds = (1,) if quick else (1, 2, 3)
    budget = 150 if quick else 1500
    settings = [("size", d) for d in (SIZE_DROPS[:1] + SIZE_DROPS[4:5] if quick else SIZE_DROPS)]
    settings += [] if quick else [("similarity", d) for d in SIMILARITY_DROPS]

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

    runner = p.Runner(out_dir / "cache" / "pruning", **({"workers": 1} if quick else {}))
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
        "quick": quick,
    }
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
        title=f"pruning, AdaSGD D1, {budget} requests",
    )
    axes[0].legend()
    save_figure(fig, out_dir, "pruning")
    result = write_json(
        out_dir,
        "pruning",
        {"summary": summary, "runs": {f"{k}/{d}/{s}": done[j]["accuracy"] for (k, d, s), j in jobs.items()}},
    )
    write_markdown(
        out_dir,
        "pruning",
        "\n".join(
            [
                "# pruning: accuracy lost against gradients dropped (batch ~ N(100, 33), AdaSGD, D1)",
                "",
                f"lr {lr} ({lr_source}); seeds {list(seeds)}; {budget} task requests per run; "
                "loss paired per seed against p = 0. Thesis: " + summary["thesis"] + ".",
                "",
                "| threshold | p | fraction dropped | final accuracy | loss (points) | updates |",
                "|---|---|---|---|---|---|",
                *[
                    f"| {r['kind']} | {r['p']} | {fmt(r['fraction_dropped'], 3)} | {fmt(r['accuracy'], 3)} | "
                    f"{fmt(r['accuracy_loss_points'], 1)} | {fmt(r['updates'])} |"
                    for r in rows
                ],
            ]
        ),
    )
    return result
