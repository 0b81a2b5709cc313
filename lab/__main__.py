"""`python -m lab`: run the lab's experiments and benchmarks, list them, regenerate the results tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lab import RESULTS

app = typer.Typer(help="Fleet's lab: experiments and benchmarks (docs/results/).", no_args_is_help=True)


@app.command("list")
def list_() -> None:
    """Every experiment and benchmark, by name."""
    from lab.runner import BENCHMARKS, EXPERIMENTS

    typer.echo("experiments:\n  " + "\n  ".join(sorted(EXPERIMENTS)))
    typer.echo("benchmarks:\n  " + "\n  ".join(sorted(BENCHMARKS)))


@app.command()
def run(
    name: Annotated[str, typer.Argument(help="an experiment or benchmark (python -m lab list)")],
    quick: Annotated[bool, typer.Option(help="the quick plan (small, fast: used by tests)")] = False,
    fresh: Annotated[bool, typer.Option(help="ignore runs cached by earlier invocations")] = False,
    seed: int = 0,
    out: Annotated[Path | None, typer.Option(help="results directory (default docs/results)")] = None,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
) -> None:
    """Run NAME's full (or quick) plan; writes docs/results/NAME.{json,md,png} (NAME-quick.* with --quick).

    Runs are cached under docs/results/cache/NAME (not committed), keyed by every parameter and a hash of
    the code, so an interrupted experiment resumes; --fresh recomputes every run."""
    from lab.runner import run as run_entry

    result = run_entry(name, quick=quick, seed=seed, fresh=fresh, out_dir=out or RESULTS, progress=progress)
    for claim in result.claims:
        typer.echo(f"{claim.claim}: {claim.measured} (target {claim.target})")
    if not result.claims:
        typer.echo(str(result.summary)[:2000])


@app.command()
def report(
    out: Annotated[Path | None, typer.Option(help="results directory (default docs/results)")] = None,
    readme: Annotated[Path, typer.Option(help="the page holding the results table")] = RESULTS / "README.md",
) -> None:
    """Regenerate the results tables from the records: docs/results/README.md's table, the README's table of
    the default, and performance.md."""
    import json

    from lab.bench import render_markdown
    from lab.results_table import DEFAULT_END, DEFAULT_START, default_table, replace_block, update_readme

    results = out or RESULTS
    typer.echo(update_readme(readme, results))
    front = RESULTS.parent.parent / "README.md"
    if readme == RESULTS / "README.md" and front.exists():  # the front page's table of the default
        replace_block(front, DEFAULT_START, DEFAULT_END, default_table(results))
    performance = results / "performance.json"
    if performance.exists():
        performance.with_suffix(".md").write_text(render_markdown(json.loads(performance.read_text())))


if __name__ == "__main__":
    app()
