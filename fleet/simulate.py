"""`fleet simulate`: one simulated fleet on the local or the Ray gradient backend (sim/scenario.py).

Kept out of fleet/cli.py for its many options; heavy imports stay inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def simulate(
    devices: int = 1_000,
    gradients: Annotated[int, typer.Option(help="stop after this many gradients")] = 2_000,
    model: str = "mnist_cnn",
    strategy: str = "adasgd",
    learning_rate: float = 0.1,
    batch: int = 100,
    seed: int = 0,
    churn: Annotated[float, typer.Option(help="chance a device leaves for good at a session's end")] = 0.05,
    mean_online: float = 600.0,
    mean_offline: float = 900.0,
    heterogeneity: Annotated[str, typer.Option(help="device speeds: 'catalog' or 'classes'")] = "catalog",
    eval_every: Annotated[int, typer.Option(help="gradients between evaluations (0: start and end)")] = 0,
    backend: Annotated[str, typer.Option(help="where gradients are computed: 'local' or 'ray'")] = "local",
    ray_workers: Annotated[
        int | None, typer.Option(help="with --backend ray: actors (and CPUs of a local cluster)")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="with --backend ray: join this cluster (ray start --head)")
    ] = None,
    ray_chunk: Annotated[int, typer.Option(help="with --backend ray: tasks per remote call")] = 8,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the outcome as JSON here")] = None,
) -> None:
    """Simulate a fleet (virtual clock, the real coordinator core, real ONNX gradients) and print its
    outcome and where the wall time went; --backend ray computes the gradients on Ray actors."""
    import json

    from sim.backends import BACKENDS, BackendUnavailable
    from sim.scenario import Scenario, run_scenario

    if backend not in BACKENDS:
        raise typer.BadParameter(f"--backend is one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend != "ray" and (ray_workers is not None or ray_address is not None):
        raise typer.BadParameter("--ray-workers and --ray-address go with --backend ray")
    scenario = Scenario(
        devices=devices,
        gradients=gradients,
        model=model,
        strategy=strategy,
        learning_rate=learning_rate,
        batch=batch,
        seed=seed,
        mean_online=mean_online,
        mean_offline=mean_offline,
        churn=churn,
        heterogeneity=heterogeneity,
        eval_every=eval_every,
    )
    try:
        outcome = run_scenario(
            scenario, backend=backend, workers=ray_workers, address=ray_address, chunk=ray_chunk
        )
    except BackendUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    if json_out is not None:
        json_out.write_text(json.dumps(outcome, indent=1))
    for key, value in outcome.items():
        if key not in {"scenario", "accuracy_curve", "backend_stats"}:
            typer.echo(f"{key}: {value}")
