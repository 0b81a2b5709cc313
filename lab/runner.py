"""The lab's one runner: names, plans, seeds, the run cache, the output files and the progress bar.

``run("staleness", quick=True)`` picks the entry's quick plan, runs it with a ``Context`` (its cache
directory docs/results/cache/NAME, the results directory to read other records from, the progress
bar), and writes what the result renders to: NAME.json (the record), NAME.md, NAME.png; a quick run
writes NAME-quick.* (gitignored), so it never overwrites the committed results; an entry with a page of
its own (``Experiment.page``: soak and chaos both render reliability.md) writes its markdown there.
Entries never write their result files themselves; a long run writes partial results through
``ctx.checkpoint``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lab import RESULTS, ROOT, cache
from lab.contract import Claim, Context, Experiment, Result

# name → module holding its ``EXPERIMENT`` (imported lazily: entries pull in matplotlib, the simulator)
EXPERIMENTS: dict[str, str] = {
    "staleness": "lab.experiments.staleness",
    "iid": "lab.experiments.iid",
    "long-tail": "lab.experiments.long_tail",
    "pruning": "lab.experiments.pruning",
    "async-vs-sync": "lab.experiments.async_vs_sync",
    "wire-float16": "lab.experiments.wire_float16",
    "profiler-time": "lab.experiments.profiler_time",
    "profiler-energy": "lab.experiments.profiler_energy",
    "profiler-tune": "lab.experiments.profiler_tune",
    "default-search": "lab.experiments.default_search",
    "adasgd-why": "lab.experiments.adasgd_why",
    "loss-guard": "lab.experiments.loss_guard",
    "dp-staleness": "lab.experiments.dp_staleness",
    "mapa": "lab.experiments.mapa",
    "vandijk": "lab.experiments.vandijk",
    "adp2sgd": "lab.experiments.adp2sgd",
    "kardam": "lab.experiments.kardam",
    "robust": "lab.experiments.robust",
    "wkafl": "lab.experiments.wkafl",
    "privacy-audit": "lab.experiments.privacy_audit",
    "online-vs-standard": "lab.experiments.online_vs_standard",
}
BENCHMARKS: dict[str, str] = {
    "performance": "lab.bench",  # gradient, throughput, memory, wire, profiler, simulator
    "fuzz": "lab.bench.fuzz",
    "soak": "lab.bench.soak",
    "chaos": "lab.bench.chaos",
    "peer": "lab.bench.peer",
    "peer-adjacent": "lab.bench.peer_adjacent",
    "console": "lab.bench.console_pages",
    "dp": "lab.bench.dp_overhead",
    "scale-out": "lab.bench.scale_out",
    "ray": "lab.bench.ray_sim",
    "browser": "lab.bench.browser",
}
ENTRIES: dict[str, str] = {**EXPERIMENTS, **BENCHMARKS}


def entry(name: str) -> Experiment[Any]:
    try:
        module = importlib.import_module(ENTRIES[name])
    except KeyError:
        raise ValueError(f"unknown experiment or benchmark {name!r}; known: {sorted(ENTRIES)}") from None
    return module.EXPERIMENT


def output_name(name: str, quick: bool) -> str:
    return f"{name}-quick" if quick else name


class Bar:
    """The progress bar: one line per stage of the running entry (rich; plain lines off a terminal)."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            disable=not enabled,
        )

    @contextmanager
    def stage(self, label: str, total: int | None) -> Iterator[Any]:
        task = self.progress.add_task(label, total=total)
        try:
            yield lambda n=1: self.progress.advance(task, n)
        finally:
            self.progress.update(task, completed=total) if total is not None else None


def write(entry_: Experiment[Any], plan: Any, result: Result, out_dir: Path, name: str) -> dict[str, Any]:
    """The entry's files from its result: NAME.json (the record), NAME.md, NAME.png (if it plots)."""
    from lab.results_table import claims

    out_dir.mkdir(parents=True, exist_ok=True)
    record = result.record()
    (out_dir / f"{name}.json").write_text(entry_.dumps(record))
    page = name.replace(entry_.stem, entry_.page, 1) if entry_.page else name
    (out_dir / f"{page}.md").write_text(entry_.markdown(result, plan).rstrip() + "\n")
    if entry_.plot is not None and (fig := entry_.plot(result)) is not None:
        from lab.render import save_figure

        save_figure(fig, out_dir, name)
    result.claims = [Claim(*row) for row in claims(entry_.stem, record)]
    return record


def run(
    name: str,
    *,
    quick: bool = False,
    seed: int = 0,
    fresh: bool = False,
    out_dir: Path = RESULTS,
    progress: bool = True,
    plan: Any = None,
) -> Result:
    """Run one entry's quick or full plan and write its files under ``out_dir``; returns its result.

    Runs are cached under ``out_dir/cache/NAME`` keyed by every parameter and the code version
    (lab/cache.py); ``fresh`` ignores what earlier invocations cached."""
    experiment = entry(name)
    if fresh:
        cache.start_fresh()
    plan = plan or experiment.plan(quick)  # another plan than the registered two: tests, a subset
    out = output_name(experiment.stem, quick)
    bar = Bar(progress)
    ctx = Context(
        name=out,
        seed=seed,
        results=out_dir,
        cache=out_dir / "cache" / name,
        workdir=ROOT / "var" / "lab" / out,
        checkpoint=lambda partial: write(experiment, plan, partial, out_dir, out) and None,
        stage=bar.stage,
    )
    with bar.progress:
        result = experiment.run(plan, ctx)
    write(experiment, plan, result, out_dir, out)
    return result
