"""System benchmarks: each prints its figures and ratios measured side by side in one run.

Each module exposes ``run(*, quick: bool) -> dict`` returning ``{"name", "figures": {...}, "table": [rows]}``;
`fleet bench NAME` / `fleet bench all` run them and write docs/results/performance.md and .json.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

BENCHMARKS: dict[str, str] = {
    "gradient": "lab.bench.gradient",
    "throughput": "lab.bench.throughput",
    "memory": "lab.bench.memory",
    "wire": "lab.bench.wire",
    "profiler": "lab.bench.profiler",
    "simulator": "lab.bench.simulator",
}
# Benchmarks with a report of their own (docs/results/NAME.md/.json): each module has
# ``main(*, quick: bool, out_dir: Path) -> dict`` and writes its files itself.
REPORTS: dict[str, str] = {
    "fuzz": "lab.bench.fuzz",
    "soak": "lab.bench.soak",
    "chaos": "lab.bench.chaos",
    "peer": "lab.bench.peer",
    "console": "lab.bench.console_pages",
    "dp": "lab.bench.dp_overhead",
    "scale-out": "lab.bench.scale_out",  # also `fleet bench throughput --topology workers`
    "ray": "lab.bench.ray_sim",  # large simulations on the Ray backend: docs/results/ray-sim.md
}
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


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


def run_report(name: str, *, quick: bool = False, out_dir: Path = RESULTS) -> dict[str, Any]:
    """Run one benchmark of ``REPORTS``: it writes its own results files under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = importlib.import_module(REPORTS[name]).main(quick=quick, out_dir=out_dir)
    return result


def run_benchmarks(names: list[str], *, quick: bool = False, out_dir: Path = RESULTS) -> dict[str, Any]:
    """Run the named benchmarks, merge them into performance.json and rewrite performance.md."""
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("performance-quick.json" if quick else "performance.json")
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    results.setdefault("benchmarks", {})
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        result = module.run(quick=quick)
        result["machine"] = machine()
        results["benchmarks"][name] = result
    path.write_text(json.dumps(results, indent=1))
    path.with_suffix(".md").write_text(render_markdown(results))
    return results


def render_markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Performance",
        "",
        "Written by `fleet bench all` (see bench/). Ratios are measured side by side in one",
        "run; absolute numbers depend on the machine and its load, given with each table.",
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
    return "\n".join(lines + scale_out_summary())


def scale_out_summary(results_dir: Path = RESULTS) -> list[str]:
    """Issue 18's figures that have reports of their own, summarised here with their commands."""
    lines = ["## Scale-out and large simulations", ""]
    scale, ray = results_dir / "scale-out.json", results_dir / "ray-sim.json"
    if scale.exists():
        data = json.loads(scale.read_text())
        cnn = [r for r in data["throughput"] if r["model"] == "mnist_cnn" and r["devices"] == 200]
        rate = next(r for r in data["aggregator"] if r["model"] == "mnist_cnn")
        lines += [
            f"`fleet bench throughput --topology workers` ({data['machine']['date']}, "
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
            f"`fleet bench ray` ([ray-sim.md](ray-sim.md)): `{large['command']}`: {large['seconds_run']} s, "
            f"overhead beyond gradient computation {large['overhead']:.1%} (target ≤ 20%).",
            "",
        ]
    return lines if len(lines) > 2 else []
