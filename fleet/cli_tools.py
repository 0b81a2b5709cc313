"""`fleet admin`, `fleet data`, `fleet profiler`: the setup commands beside the main ones (fleet/cli.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

data_app = typer.Typer(help="Prepare device data shards.", no_args_is_help=True)
profiler_app = typer.Typer(help="I-Prof: bootstrap data for the cold start.", no_args_is_help=True)
admin_app = typer.Typer(help="Admin console accounts.", no_args_is_help=True)


@admin_app.command("create-user")
def admin_create_user(
    username: str,
    password_stdin: Annotated[bool, typer.Option(help="read the password from stdin (scripts)")] = False,
) -> None:
    """Create a console user in the configured database (FLEET_DATABASE_URL / FLEET_DATA_DIR)."""
    import sys

    from server.compose import build_store
    from server.console.accounts import AccountError, Accounts
    from server.settings import Settings
    from server.store.admin import AdminStore

    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    accounts = Accounts(AdminStore(build_store(Settings()).sessions))
    try:
        accounts.create_user(username, password)
    except AccountError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"created console user {username!r}")


@data_app.command("prepare")
def data_prepare(
    devices: int = 20,
    partition: Annotated[
        str, typer.Option(help="sorted (non-IID, 2 shards per device), iid, or wkafl-L<n> (Alg. 4, n labels)")
    ] = "sorted",
    out: Path = Path("var/data"),
    seed: int = 0,
) -> None:
    """Write real MNIST shards, one .npz per device, and the held-out test set."""
    from sim.data import write_shards

    paths, test = write_shards(out, devices=devices, partition=partition, seed=seed)
    typer.echo(f"wrote {len(paths)} shards and {test} ({os.path.getsize(test)} bytes)")


@profiler_app.command("bootstrap")
def profiler_bootstrap(
    out: Path = Path("var/profiler/bootstrap.csv"),
    time_slo_ms: float = 3000.0,
    energy_slo: Annotated[float | None, typer.Option(help="also grow until energy reaches 2x this")] = None,
    catalog: Annotated[Path | None, typer.Option(help="device catalogue CSV or FedScale trace")] = None,
    runs: int = 3,
    seed: int = 0,
) -> None:
    """Grow batch sizes on the catalogue's bootstrap devices until 2x the SLO; write the cold-start data."""
    import numpy as np

    from sim.bootstrap import collect_bootstrap, write_bootstrap
    from sim.devices import CATALOG_PATH, load_catalog, split_roles

    train, _ = split_roles(load_catalog(catalog or CATALOG_PATH))
    rows = collect_bootstrap(
        train or load_catalog(catalog or CATALOG_PATH),
        time_slo_ms=time_slo_ms,
        energy_slo=energy_slo,
        runs_per_device=runs,
        rng=np.random.default_rng(seed),
    )
    path = write_bootstrap(rows, out)
    typer.echo(f"wrote {len(rows)} rows from {len({r['device_model'] for r in rows})} devices to {path}")
