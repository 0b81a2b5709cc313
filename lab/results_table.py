"""The results table, generated from the results' JSON: every claim, flattering or not.

`python -m lab report` rewrites the block between the two markers in docs/results/README.md; a test checks
that the committed page matches what the committed results say. Each row reads one summary and states
the comparison as measured (censored runs marked as in the tables), the thesis figure or target, and
the file with the ranges, settings and command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lab.render import fmt
from lab.render import read_results as _load
from lab.render import results_link as _link
from lab.results_table_device import DEVICE_SECTIONS
from lab.results_table_online import ONLINE_SECTIONS
from lab.results_table_privacy import PRIVACY_SECTIONS
from lab.results_table_profiler import PROFILER_SECTIONS
from lab.results_table_robust import ROBUST_SECTIONS
from lab.results_table_scale import SCALE_SECTIONS
from lab.results_table_seeds import SEED_SECTIONS

START, END = "<!-- results:start -->", "<!-- results:end -->"
Row = tuple[str, str, str, str]  # claim, measured, thesis / target, file


def _cell(table: dict[str, Any], variant: str, field: str, digits: int = 0) -> str:
    row = table.get(variant)
    return fmt(row[field], digits) if row and field in row else "—"


def staleness_rows(data: dict[str, Any], name: str = "staleness", label: str = "non-IID") -> Iterator[Row]:
    s = data["summary"]
    dists = [d for d in ("D1", "D2") if f"{d}/a" in s["tables"]]
    thesis = " / ".join(str(s["thesis_saving_pct"][d]) for d in dists)
    for proto, how in (("b", "each strategy at its tuned rate"), ("a", f"shared rate {s['shared_lr']}")):
        cells = " / ".join(
            _cell(s["tables"][f"{d}/{proto}"], "adasgd", "saving_over_dynsgd_pct", 1) for d in dists
        )
        yield (
            f"AdaSGD's saving in updates to 80% vs DynSGD, {label} MNIST, {' / '.join(dists)}, {how} (%)",
            cells,
            thesis,
            _link(f"{name}.md"),
        )
    for d in dists:
        t = s["tables"][f"{d}/b"]
        yield (
            f"updates to 80%, {label} {d}, each at its tuned rate: AdaSGD / DynSGD / FedAvg-async",
            " / ".join(_cell(t, v, "updates_to_80") for v in ("adasgd", "dynsgd", "fedavg-async")),
            "AdaSGD fewest",
            _link(f"{name}.md"),
        )
    if default := s.get("default"):
        yield (
            f"updates to 80%, {label} {' / '.join(dists)}: the default when it ran ({default}, untuned) vs "
            "DynSGD tuned",
            " / ".join(
                f"{_cell(s['tables'][f'{d}/b'], default, 'updates_to_80')} vs "
                f"{_cell(s['tables'][f'{d}/b'], 'dynsgd', 'updates_to_80')}"
                for d in dists
            ),
            "≤ DynSGD tuned",
            _link(f"{name}.md"),
        )
    statuses = [r for d in dists for r in s["tables"][f"{d}/a"].get("fedavg-async", {}).get("status", [])]
    if statuses:
        yield (
            f"FedAvg-async at the shared rate {s['shared_lr']}, {label}",
            f"reaches 80% in {statuses.count('reached')} of {len(statuses)} runs",
            "fails",
            _link(f"{name}.md"),
        )


def dp_rows(data: dict[str, Any]) -> Iterator[Row]:
    """Thesis Fig. 3.11 (issue 15): AdaSGD vs DynSGD under DP-SGD at each ε, each at its tuned rate."""
    s = data["summary"]
    eps = [e for e in s["epsilons"] if f"{e}/b" in s["tables"]]
    ledger = {e: (s["accounting"].get(e) or {}).get("ledger") for e in eps}
    names = " / ".join(
        "∞" if e == "inf" else f"{e} (ledger {ledger[e]['epsilon']:.1f})" if ledger[e] else e for e in eps
    )
    yield (
        f"AdaSGD's saving in updates to 80% vs DynSGD under DP-SGD, IID MNIST, D2, pooled ε = {names}, "
        "each at its tuned rate (%)",
        " / ".join(_cell(s["tables"][f"{e}/b"], "adasgd", "saving_over_dynsgd_pct", 1) for e in eps),
        "AdaSGD ahead at every ε (≥ 0)",
        _link("dp-staleness.md"),
    )
    yield (
        f"test accuracy at the cap ({s['cap']:,} updates) under DP, pooled ε = {names}: AdaSGD / DynSGD",
        " / ".join(
            f"{s['tables'][f'{e}/b']['adasgd']['final_accuracy']['median']:.3f} vs "
            f"{s['tables'][f'{e}/b']['dynsgd']['final_accuracy']['median']:.3f}"
            for e in eps
        ),
        "smaller ε slows both",
        _link("dp-staleness.md"),
    )


def long_tail_rows(data: dict[str, Any]) -> Iterator[Row]:
    protocols = data["summary"]["protocols"]
    yield (
        "long tail: AdaSGD / DynSGD updates until class-0 recall ≥ 50%, (b) tuned rates / (a) shared rate",
        " / ".join(fmt(protocols[p]["ratio_adasgd_over_dynsgd"], 2) for p in ("b", "a") if p in protocols),
        "≤ 0.5",
        _link("long-tail.md"),
    )


def async_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    for arm in ("ssgd-wait-all", "ssgd-production", "fedbuff", "default"):
        if arm not in s["tables"]["b"]["time_over_adasgd"]:
            continue
        cells = [fmt(s["tables"][p]["time_over_adasgd"][arm], 2) for p in ("b", "a") if p in s["tables"]]
        yield (
            f"virtual time to 80%, {arm} / AdaSGD, {s['devices']} devices with a 7.2x speed spread, "
            "(b) tuned rates / (a) shared rate",
            " / ".join(cells),
            {"ssgd-wait-all": "≥ 3 (SSGD waiting for all)", "default": "≤ 1, untuned"}.get(arm, "> 1"),
            _link("async-vs-sync.md"),
        )


def held_back_time(run: dict[str, Any]) -> str:
    """The default's time to a held-back workload's target: "diverged", seconds, or its end (missed)."""
    if run["diverged"]:
        return "diverged"
    return f"{run['time']:.1f}" if run["time"] is not None else f"≥ {run['end_time']:.1f} (missed)"


def default_rows(data: dict[str, Any]) -> Iterator[Row]:
    """`python -m lab run default-search`: on each held-back workload, the untuned default's time to the
    workload's target against the best tuned run's, and its final accuracy against the best."""
    from sim.workloads import workload as workload_named

    s = data["summary"]
    for workload, h in s["held_back"].items():
        own, best = h["default"], h["best"]
        time = held_back_time(own)
        ratio = f" ({own['ratio']:.2f}x)" if own["ratio"] is not None else ""
        rates = s["default_rate"]
        rate = rates[workload_named(workload).model] if isinstance(rates, dict) else rates  # its model's
        yield (
            f"held-back {workload}: virtual s to {h['target']:.3f} (best final − 1 pt) and final accuracy, "
            f"the default ({s['default']}, γ={rate}, untuned) / the best tuned run "
            f"({best['arm']}, γ={best['lr']})",
            f"{time} / {best['time']:.1f}{ratio}; {own['final']:.3f} / {h['best_final']:.3f}",
            "≤ 1.1x; within 0.005",
            _link("default-search.md"),
        )


def peer_rows(data: dict[str, Any]) -> Iterator[Row]:
    """`python -m lab run peer`: wall time to 90% on one machine, Fleet's default against Flower and
    against Fleet's tuned arms, and the default at a quarter and four times its rate."""
    arms = data["summary"]["arms"]
    default = arms.get("fleet")
    if default is None:
        return

    def secs(arm: dict[str, Any]) -> str:
        return ("≥ " if arm["time_to_90_censored"] else "") + f"{arm['time_to_90_s']:.1f}"

    if (best := data["summary"]["flower_best"]) is not None:  # None: Flower not run (a quick plan)
        flower = arms[best]
        yield (
            "wall s to 90%, peer workload (20 devices, non-IID): Fleet's default untuned / "
            "Flower FedAvg best",
            f"{secs(default)} / {secs(flower)} "
            f"({default['ratio_mark_90']}{default['ratio_to_flower_best_90']:.2f}x)",
            "≤ 0.3x",
            _link("peer-flower.md"),
        )
    # every Fleet arm with a strategy and rate of its own (not the default, nor the default × a factor)
    tuned = {n: a for n, a in arms.items() if a["system"] == "fleet" and n.count(":") >= 2}
    if tuned:
        name = min(tuned, key=lambda n: tuned[n]["time_to_90_s"])
        ratio = default["time_to_90_s"] / tuned[name]["time_to_90_s"]
        yield (
            "wall s to 90%, peer workload: Fleet's default untuned / the best tuned Fleet arm",
            f"{secs(default)} / {secs(tuned[name])} ({tuned[name]['configuration']}): {ratio:.2f}x",
            "≤ 1.1x",
            _link("peer-flower.md"),
        )
    if "fleet:x0.25" in arms and "fleet:x4" in arms:
        yield (
            "wall s to 90%, peer workload: the default at ×0.25 / ×4 its rate",
            f"{secs(arms['fleet:x0.25'])} / {secs(arms['fleet:x4'])}",
            "no divergence",
            _link("peer-flower.md"),
        )


def pruning_rows(data: dict[str, Any]) -> Iterator[Row]:
    rows = {(r["kind"], r["p"]): r for r in data["summary"]["rows"]}
    for key, claim, thesis in (
        (("size", 0.392), "dropping the 39% smallest batches: accuracy points lost", "< 2.2"),
        (("similarity", 0.17), "dropping the 17% most similar requests: accuracy points lost", "4.8"),
    ):
        if key in rows:
            yield claim, fmt(rows[key]["accuracy_loss_points"], 1), thesis, _link("pruning.md")


def performance_rows(data: dict[str, Any]) -> Iterator[Row]:
    benchmarks = data["benchmarks"]
    throughput = benchmarks.get("throughput", {}).get("table", [])
    at200 = {r["model"]: r for r in throughput if r["devices"] == 200}
    if at200:
        yield (
            "durable pushes/s over HTTP, CNN / MLP, 200 devices (push p99 ms)",
            " / ".join(
                f"{at200[m]['pushes/s']} ({at200[m]['push p50/p99 ms'].split('/')[-1].strip()})"
                for m in at200
            ),
            "500 / 200 (p99 ≤ 100)",
            _link("performance.md"),
        )
    gradient = benchmarks.get("gradient", {}).get("table", [])
    if gradient:
        yield (
            "onnxruntime / torch gradient time, CNN / MLP at 1 thread",
            " / ".join(f"{r['ratio']:.2f}" for r in gradient if r["threads"] == 1),
            " / ".join(r["target"] for r in gradient if r["threads"] == 1),
            _link("performance.md"),
        )


def wire_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    yield (
        "float16 on the wire: accuracy points lost (mean ± sd over seeds)",
        f"{s['loss_points_mean']:.2f} ± {s['loss_points_std']:.2f}",
        "< 0.5",
        _link("wire-float16.md"),
    )


# record (docs/results/NAME.json) → the rows it supports, in the table's order: an entry's claims
SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("staleness", staleness_rows),
    ("iid", lambda data: staleness_rows(data, "iid", "IID")),
    ("dp-staleness", dp_rows),
    ("long-tail", long_tail_rows),
    ("async-vs-sync", async_rows),
    ("default-search", default_rows),
    ("peer-flower", peer_rows),
    ("pruning", pruning_rows),
    *PROFILER_SECTIONS,
    ("performance", performance_rows),
    ("wire-float16", wire_rows),
    *SCALE_SECTIONS,
    *ONLINE_SECTIONS,
    *ROBUST_SECTIONS,
    *SEED_SECTIONS,
    *PRIVACY_SECTIONS,
    *DEVICE_SECTIONS,
)


def claims(record_name: str, record: dict[str, Any]) -> list[Row]:
    """The results-table rows one record supports (none for a record the table does not cite)."""
    return [row for name, rows in SECTIONS if name == record_name for row in rows(record)]


def table(results: Path) -> str:
    """The markdown table of every row the results in ``results`` support."""
    lines = ["| claim | measured | thesis / target | file |", "|---|---|---|---|"]
    for name, section in SECTIONS:
        data = _load(results, name)
        if data is None:
            continue
        lines += ["| " + " | ".join(cell.replace("|", r"\|") for cell in row) + " |" for row in section(data)]
    return "\n".join(lines)


def update_readme(readme: Path, results: Path) -> str:
    """Rewrite the block between the markers in ``readme``; returns the table written."""
    block = table(results)
    replace_block(readme, START, END, block)
    return block


DEFAULT_START, DEFAULT_END = "<!-- default:start -->", "<!-- default:end -->"


def default_table(results: Path) -> str:
    """The front page's table: the shipped default on each held-back workload of the default search."""
    data = _load(results, "default-search")
    if data is None:
        return "(no default-search results yet: `python -m lab run default-search`)"
    from lab.experiments.default_search import ARMS
    from lab.experiments.default_search_report import rates_text

    s = data["summary"]
    registered = ARMS.get(s["default"], (s["default"], {}))[0]
    rates = rates_text(s["default_rate"], s.get("default_max_step"))
    lines = [
        f"The default ({registered}, {rates}, untuned) on the workloads its choice "
        "never saw, against the best tuned run on each (virtual seconds to the workload's target, the best "
        "final accuracy less 1 point; final accuracy):",
        "",
        "| held-back workload | target | default: s / final | fastest tuned run: s / final | ratio "
        "| best final of any run | ratio, final gap (points) against one tuned on the other seeds "
        "| the same against those tuned on the reported seeds, all on fresh seeds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload, h in s["held_back"].items():
        own, best = h["default"], h["best"]
        fastest = s["judged"][workload]["runs"][f"{best['arm']}@{best['lr']}"]
        time = held_back_time(own)
        ratio = f"{own['ratio']:.2f}x" if own["ratio"] is not None else "—"
        cross = h.get("cross_seed")
        fair = "—" if cross is None else f"{cross['ratio']:.2f}x, {100 * cross['final_gap']:.1f}"
        fresh = "—"
        if (again := h.get("fresh_seeds")) is not None:
            ratio_again = "missed" if again["ratio"] is None else f"{again['ratio']:.2f}x"
            fresh = f"{ratio_again}, {100 * again['final_gap']:.1f}"
        lines.append(
            f"| {workload} | {h['target']:.3f} | {time} / {own['final']:.3f} | {best['time']:.1f} / "
            f"{fastest['final']:.3f} ({best['arm']}, γ {best['lr']}) | {ratio} | {h['best_final']:.3f} "
            f"| {fair} | {fresh} |"
        )
    lines += [
        "",
        "The fastest tuned run is the best of every configuration on the seeds it is reported on, which "
        "favours it by luck; the next column tunes on two seeds and times on the third, each in turn "
        "(means), the last runs the configurations tuned on the reported seeds and the default again on "
        "three fresh seeds ([default-search.md](docs/results/default-search.md)).",
    ]
    return "\n".join(lines)


def replace_block(page: Path, start: str, end: str, block: str) -> None:
    """Rewrite what lies between the markers ``start`` and ``end`` in ``page``."""
    text = page.read_text()
    if start not in text or end not in text:
        raise ValueError(f"{page} has no {start} … {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{block}\n{end}{tail}")
