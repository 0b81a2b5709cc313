"""The seeds' strategies in README's "Results at a glance" (issues 16 and 17): one section per seed
experiment, each claim beside our number, met or not."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.render import number, results_link

Row = tuple[str, str, str, str]


def mapa_rows(data: dict[str, Any]) -> Iterator[Row]:
    exact, paper = data["summary"]["exact"], data["summary"]["paper"]
    yield (
        "MAPA (untuned ΔS₀, worst) vs AUDP at its best clip, K = 100, ε = 0.1: test accuracy, "
        "exact DP sampler / the paper's sampler",
        f"{number(exact['mapa_worst_accuracy_untuned'])} vs {number(exact['audp_best_accuracy'])} / "
        f"{number(paper['mapa_worst_accuracy_untuned'])} vs {number(paper['audp_best_accuracy'])}",
        "MAPA ≈ AUDP-best",
        results_link("mapa.md"),
    )


def vandijk_rows(data: dict[str, Any]) -> Iterator[Row]:
    fig1b = data["summary"]["fig1b"]
    ratio = {k: fig1b[k]["rounds_ratio"] for k in ("equal_sigma", "equal_epsilon")}
    cells = " / ".join("never" if r is None else f"{r:.2f}" for r in ratio.values())
    yield (
        "van Dijk et al., DP: rounds with increasing sizes / constant size 16 to equal accuracy, "
        "equal σ / equal ε",
        cells,
        "≤ 0.5 (seed: 1/8.02)",
        results_link("vandijk.md"),
    )


def adp2sgd_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    levels = ("none", "small", "medium", "large")
    for model, rows in s["table1"].items():
        gaps = " / ".join(f"{rows[level]['gap']:+.1f}" for level in levels if level in rows)
        yield (
            f"A(DP)²SGD − DP synchronous SGD, final accuracy points, {model}, noise none / σ 1 / 2 / 4",
            gaps,
            "≥ −1 (seed's median gaps +0.6 / −0.1 / −0.7 / −1.1)",
            results_link("adp2sgd.md"),
        )
    speedups = " / ".join(
        f"{model} {cases['one-10x']['speedup']:.1f}x" for model, cases in s["wall_clock"].items()
    )
    yield (
        "virtual time to target, SYNC / A(DP)²SGD, one learner 10x slower (case II)",
        speedups,
        "> 1 (gossip faster)",
        results_link("adp2sgd.md"),
    )


def _pct(stats: dict[str, Any]) -> str:
    if stats.get("median") is None:
        return "—"
    return f"{stats['median']:.1%} ({stats['min']:.1%}–{stats['max']:.1%})"


def kardam_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    t = s["tables"]
    yield (
        "Kardam: honest gradients dropped without attackers, D1, Λ = 1/(τ+1) / exp(−0.2τ)",
        f"{_pct(t['clean/inverse']['honest_drop_ratio'])} / {_pct(t['clean/exp']['honest_drop_ratio'])}",
        "27.9% / 19.6%",
        results_link("kardam.md"),
    )
    attack = t["attack/kardam"]
    yield (
        "Kardam, 3 of 10 devices send −10g: attacker gradients filtered / honest dropped / final accuracy",
        f"{_pct(attack['byzantine_filtered'])} / {_pct(attack['honest_drop_ratio'])} / "
        f"{number(attack['final_accuracy']['median'])}",
        "≥ 95% (thesis 100%) / ≤ 30%",
        results_link("kardam.md"),
    )
    live = s.get("live")
    if live:
        yield (
            "Kardam through the real API: clean − attacked accuracy, median over seeds (points)",
            f"{100 * live['gap_median']:.1f}, within 2 on {live['met_pairs']} of {len(live['pairs'])} seeds",
            "≤ 2",
            results_link("kardam.md"),
        )


def wkafl_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    row = s["table2"]["300"]
    methods = ("wkafl", "twafl", "sasgd")
    yield (
        "WKAFL / TWAFL / SASGD at P/K = 300, L_num = 1: accuracy, stability (std of the last 10)",
        " / ".join(f"{row[m]['final_accuracy']:.3f}" for m in methods)
        + ", "
        + " / ".join(f"{row[m]['stability']:.4f}" for m in methods),
        "0.9728 / 0.9572 / 0.8553, 0.0060 / 0.0107 / 0.0834",
        results_link("wkafl.md"),
    )
    yield (
        "WKAFL ahead of TWAFL / of SASGD (rows of Tables 2-3), steadier than SASGD (L_num rows)",
        f"{s['wkafl_ahead_of_twafl_rows']}/{s['rows']} / {s['wkafl_ahead_of_sasgd_rows']}/{s['rows']}, "
        f"{s['wkafl_more_stable_than_sasgd_rows']}/{len(s['table3'])}"
        " (at 4,000 iterations; 2,000 did not hold)",
        "every row",
        results_link("wkafl.md"),
    )


SEED_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("mapa", mapa_rows),
    ("vandijk", vandijk_rows),
    ("adp2sgd", adp2sgd_rows),
    ("kardam", kardam_rows),
    ("wkafl", wkafl_rows),
)
