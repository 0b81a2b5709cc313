"""System benchmarks: figures and ratios measured side by side in one run (`python -m lab run NAME`).

``performance``: the modules of ``BENCHMARKS`` (each ``run(plan) -> {"name", "figures", "table"}``, its
plan a section of ``PerformancePlan``, lab/bench/plans.py), written to docs/results/performance.{json,md}.
The others (lab/runner.py's BENCHMARKS) have a report of their own: ``own`` below registers one on the
lab's contract (``run(plan, ctx) -> Result``, its plans in lab/bench/plans.py, the runner writes the
files).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.bench.plans import PERFORMANCE_FULL, PERFORMANCE_QUICK, PerformancePlan
from lab.contract import Context, Experiment, P, Plan, Result

# the performance table's benchmarks (`python -m lab run performance`): each module's ``run(plan)``
# returns {"name", "figures", "table"}; they share docs/results/performance.{json,md}
BENCHMARKS: dict[str, str] = {
    "gradient": "lab.bench.gradient",
    "throughput": "lab.bench.throughput",
    "memory": "lab.bench.memory",
    "wire": "lab.bench.wire",
    "profiler": "lab.bench.profiler",
    "simulator": "lab.bench.simulator",
}
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def machine() -> dict[str, Any]:
    """What the numbers were measured on (load included: these machines are shared and noisy)."""
    import numpy as np
    import onnxruntime

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": onnxruntime.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def run_performance(plan: PerformancePlan, ctx: Context) -> Result:
    """Run the performance benchmarks (each with its section of the plan) and merge them into the
    record's earlier sections; the dp benchmark's record (dp-overhead.json) is its section "dp"."""
    unknown = [n for n in plan.benchmarks if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}")
    path = ctx.results / f"{ctx.name}.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    merged = dict(results.get("benchmarks", {}))
    for name in ctx.track(plan.benchmarks, "benchmarks"):
        result = importlib.import_module(BENCHMARKS[name]).run(getattr(plan, name))
        result["machine"] = machine()
        merged[name] = result
    dp = ctx.results / f"{ctx.name.replace('performance', 'dp-overhead', 1)}.json"
    if dp.exists():  # the dp benchmark's own record (`python -m lab run dp`), its section last
        merged.pop("dp", None)
        merged["dp"] = json.loads(dp.read_text())
    return Result({"benchmarks": list(plan.benchmarks)}, records={"benchmarks": merged})


def run_benchmarks(names: list[str], *, quick: bool = False, out_dir: Path = RESULTS) -> dict[str, Any]:
    """Run some of the performance benchmarks through the lab's runner; returns performance.json."""
    from lab.runner import run

    plan = dataclasses.replace(EXPERIMENT.plan(quick), benchmarks=tuple(names))
    record = run("performance", quick=quick, out_dir=out_dir, plan=plan, progress=False).record()
    return {k: v for k, v in record.items() if k != "summary"}


def run_report(name: str, *, quick: bool = False, out_dir: Path = RESULTS) -> dict[str, Any]:
    """Run one benchmark with a report of its own through the lab's runner; returns its summary and record."""
    from lab.runner import run

    result = run(name, quick=quick, out_dir=out_dir, progress=False)
    return {**result.records, "summary": result.summary}


def records_only(record: dict[str, Any]) -> str:
    """A benchmark's JSON as it always was: its records, without the lab's summary."""
    return json.dumps({k: v for k, v in record.items() if k != "summary"}, indent=1)


def records_and_summary(record: dict[str, Any]) -> str:
    """A benchmark's JSON whose summary was always part of it (last; a one-line summary as a string)."""
    summary = record.get("summary")
    if isinstance(summary, dict) and set(summary) == {"text"}:
        summary = summary["text"]
    return json.dumps({**{k: v for k, v in record.items() if k != "summary"}, "summary": summary}, indent=1)


def command(name: str, plan: Plan) -> str:
    """The command that ran ``plan`` (recorded in the reports)."""
    return f"python -m lab run {name}" + (" --quick" if plan.quick else "")


def own(
    name: str,
    stem: str,
    quick: P,
    full: P,
    run: Callable[[P, Context], Result],
    markdown: Callable[[Result, P], str],
    *,
    summary_in_json: bool = False,
    plot: Callable[[Result], Any] | None = None,
    page: str = "",
) -> Experiment[P]:
    """A benchmark with a report of its own on the lab's contract: ``run(plan, ctx)`` returns its
    record (``Result.records``: the JSON's keys as they always were) and its one-line summary; the
    runner writes STEM.json, STEM.md (and STEM.png)."""
    return Experiment(
        name, quick, full, run, markdown, plot=plot, kind="benchmark", record_name=stem, page=page,
        dumps=records_and_summary if summary_in_json else records_only,
    )  # fmt: skip


EXPERIMENT = Experiment(
    "performance",
    PERFORMANCE_QUICK,
    PERFORMANCE_FULL,
    run_performance,
    lambda result, plan: render_markdown(result.records),
    dumps=records_only,
    kind="benchmark",
)


def render_markdown(results: dict[str, Any], *, summarise_scale_out: bool = True) -> str:
    lines = [
        "# Performance",
        "",
        "Written by `python -m lab run performance` (see lab/bench/). Ratios are measured side by side in",
        "one run; absolute numbers depend on the machine and its load, given with each table.",
        "",
    ]
    for name, result in results["benchmarks"].items():
        m = result["machine"]
        lines += [
            f"## {result.get('title', name)}",
            "",
            f"Machine: {m['cpu']}, {m['cores']} cores, load {m['load_average']}, {m['date']}.",
            "",
        ]
        if result.get("note"):
            lines += [result["note"], ""]
        table = result.get("table") or []
        if table:
            header = list(table[0])
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in table]
            lines.append("")
    return "\n".join(lines + (scale_out_summary() if summarise_scale_out else []))


def scale_out_summary(results_dir: Path = RESULTS) -> list[str]:
    """Issue 18's figures that have reports of their own, summarised here with their commands."""
    lines = ["## Scale-out and large simulations", ""]
    scale, ray = results_dir / "scale-out.json", results_dir / "ray-sim.json"
    if scale.exists():
        data = json.loads(scale.read_text())
        cnn = [r for r in data["throughput"] if r["model"] == "mnist_cnn" and r["devices"] == 200]
        rate = next(r for r in data["aggregator"] if r["model"] == "mnist_cnn")
        lines += [
            f"`python -m lab run scale-out` ({data['machine']['date']}, "
            "[scale-out.md](scale-out.md)): CNN pushes/s at 200 devices, "
            + "; ".join(
                f"{r['topology']} {r['pushes/s']} (server CPU {r['server CPU µs/push']} µs/push)" for r in cnn
            )
            + f". The aggregator alone: {rate['updates/s']:,} CNN updates/s (target {rate['target']:,}).",
            "",
        ]
    if ray.exists():
        large = json.loads(ray.read_text())["large"]
        lines += [
            f"`python -m lab run ray` ([ray-sim.md](ray-sim.md)): `{large['command']}`: "
            f"{large['seconds_run']} s, "
            f"overhead beyond gradient computation {large['overhead']:.1%} (target ≤ 20%).",
            "",
        ]
    return lines if len(lines) > 2 else []
