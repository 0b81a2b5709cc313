"""`fleet`: serve, worker, demo, simulate, model export/push, data prepare. Heavy imports stay in commands."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli_model import model_app
from fleet.cli_tools import admin_app, data_app, profiler_app
from fleet.simulate import simulate

if TYPE_CHECKING:
    from client import RunSummary

app = typer.Typer(help="Fleet: online federated learning on phones and edge devices.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(data_app, name="data")
app.add_typer(profiler_app, name="profiler")
app.add_typer(admin_app, name="admin")


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its plugin INFO lines at every start


@app.command()
def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    ssl_certfile: Annotated[Path | None, typer.Option(help="TLS certificate (PEM) to serve HTTPS")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(help="TLS private key (PEM)")] = None,
    log_level: str = "info",
    role: Annotated[
        str, typer.Option(help="all: one process (default); api: a stateless worker; aggregator (scale-out)")
    ] = "",
    workers: Annotated[int, typer.Option(min=1, help="API worker processes (uvicorn --workers)")] = 1,
) -> None:
    """Run the coordinator (settings from FLEET_* environment variables or .env).

    Scale-out (docs/scale-out.md): `fleet serve --role api --workers N` and one `fleet serve --role
    aggregator`, on one PostgreSQL (FLEET_DATABASE_URL) and Redis (FLEET_REDIS_URL)."""

    import uvicorn

    _logging(True)
    if role:
        os.environ["FLEET_ROLE"] = role  # the uvicorn workers read their settings from the environment
    _runnable_settings()
    if role == "aggregator":
        from server.scale.run import run_aggregator
        from server.settings import Settings

        raise typer.Exit(run_aggregator(Settings()))
    if workers > 1:
        _one_ledger(workers)
    uvicorn.run(
        "server.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        proxy_headers=False,  # X-Forwarded-* only from FLEET_TRUSTED_PROXIES (server/api/app.py)
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
    )


def _runnable_settings() -> None:
    """Refuse to start with settings that cannot run (server/settings_rules.py: a strategy that needs DP
    without it, DP in a scale-out role, an infinite limit...), naming each setting and what it requires,
    before any process starts: the devices would otherwise fail at every grant."""
    from server.settings import Settings
    from server.settings_rules import startup_problem

    problem = startup_problem(Settings)
    if problem is not None:
        typer.echo(f"error: the settings cannot run:\n{problem}", err=True)
        raise typer.Exit(2)


def _one_ledger(workers: int) -> None:
    """Refuse several API processes with DP on: each would keep its own privacy ledger and charge a device
    only for the tasks it granted itself (issue 27, finding 11)."""
    from server.settings import Settings

    if Settings().dp:
        typer.echo(
            f"error: FLEET_DP is on, and {workers} API worker processes would each keep their own privacy"
            " ledger (a device's ε would be split between them): run one (--workers 1)",
            err=True,
        )
        raise typer.Exit(2)


@app.command()
def worker(
    data: Annotated[Path, typer.Option(help="the device's own shard (.npz with x and y)")],
    server: Annotated[str, typer.Option(help="coordinator URL")] = "http://127.0.0.1:8000",
    enrollment_key: Annotated[str, typer.Option(envvar="FLEET_ENROLLMENT_KEY")] = "",
    device_model: Annotated[str | None, typer.Option(help="e.g. 'Galaxy S7'")] = None,
    threads: int = 1,
    min_ms_per_sample: Annotated[float | None, typer.Option(help="emulate a slower device")] = None,
    delay_ms_per_sample: Annotated[
        float | None, typer.Option(help="sleep this per sample of each task on top of the real compute")
    ] = None,
    max_tasks: int | None = None,
    max_seconds: float | None = None,
    ca_bundle: Annotated[Path | None, typer.Option(help="CA file to verify an HTTPS coordinator")] = None,
    attack: Annotated[
        str | None,
        typer.Option(
            help="Byzantine (experiments): sign-flip|scaled|gaussian|label-flip|stale-replay|alie|ipm|"
            "backdoor|sybil (client/_attacks/)"
        ),
    ] = None,
    attack_param: Annotated[
        list[str] | None, typer.Option(help="the attack's parameter KEY=VALUE, repeatable: k=5, inner=alie")
    ] = None,
    sybils: Annotated[
        int | None, typer.Option(min=1, help="with --attack sybil: enroll this many devices with the one key")
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="install secret and privacy ledger of this data (default: <data>.fleet-state/)"),
    ] = None,
    privacy_budget: Annotated[
        float | None, typer.Option(help="this device's own ε budget for its data (default: the ledger's, 8)")
    ] = None,
    verbose: bool = False,
) -> None:
    """Run one device: enroll, then take tasks until training finishes or a limit is reached."""
    from client import DevicePrivacy, WorkerConfig, run_worker
    from client._attacks import ATTACKS, make_attack, parse_params
    from client._state import default_state_dir

    _logging(verbose)
    if not enrollment_key:
        raise typer.BadParameter("give --enrollment-key or set FLEET_ENROLLMENT_KEY")
    attack = None if attack is None else attack.lower()  # --attack ALIE, as the papers write it
    if attack is not None and attack not in ATTACKS:
        raise typer.BadParameter(f"--attack must be one of {', '.join(ATTACKS)}")
    if sybils is not None and attack != "sybil":
        raise typer.BadParameter("--sybils needs --attack sybil")
    try:
        params = parse_params(attack_param or [])
        if sybils is not None:
            params["count"] = str(sybils)
        if attack is not None:
            make_attack(attack, **params)  # refuse unknown parameters before enrolling anything
        elif params:
            raise ValueError("--attack-param needs --attack")
    except (ValueError, TypeError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--attack-param") from exc
    options = {"device_model": device_model} if device_model else {}
    config = WorkerConfig(
        base_url=server,
        enrollment_key=enrollment_key,
        data=data,
        threads=threads,
        min_ms_per_sample=min_ms_per_sample,
        delay_ms_per_sample=delay_ms_per_sample,
        max_tasks=max_tasks,
        max_seconds=max_seconds,
        verify=str(ca_bundle) if ca_bundle else True,
        attack=attack,  # type: ignore[arg-type]
        attack_params=params,
        state_dir=state_dir if state_dir is not None else default_state_dir(data),
        privacy=DevicePrivacy(budget=privacy_budget),
        **options,
    )

    def report(r: object) -> None:
        typer.echo(
            f"task v{r.version} L={r.batch_size} τ={r.staleness} w={r.weight:.3f} "  # type: ignore[attr-defined]
            f"t={r.compute_time_ms:.0f}ms loss={r.loss:.3f}"
        )  # type: ignore[attr-defined]

    if attack == "sybil":
        from client._sybils import run_sybils

        for i, summary in enumerate(run_sybils(config)):
            typer.echo(f"sybil {i} stopped: {stopped(summary)}")
        return
    typer.echo(f"stopped: {stopped(run_worker(config, on_report=report))}")


def stopped(summary: RunSummary) -> str:
    """Why a worker stopped, in a line: the reason, the tasks it ran, and the coordinator's sentence when
    it refused the device for good (e.g. the enrollment key's quota is full)."""
    line = f"{summary.stop_reason} after {summary.tasks} tasks"
    return f"{line}: {summary.stop_detail}" if summary.stop_detail else line


@app.command("app")
def app_command(
    folder: Annotated[
        Path | None, typer.Option(help="settings, drawings and models (default: the user's app folder)")
    ] = None,
    server: Annotated[str | None, typer.Option(help="coordinator URL to save in the settings")] = None,
    enrollment_key: Annotated[str | None, typer.Option(envvar="FLEET_ENROLLMENT_KEY")] = None,
    data: Annotated[Path | None, typer.Option(help="a demo shard (.npz) to train on too")] = None,
) -> None:
    """Start the device app (a Kivy window): status, try the model, settings. Needs the app extra."""
    import importlib.util

    if importlib.util.find_spec("kivy") is None:
        raise typer.BadParameter("Kivy is missing: pip install 'fleet-fl[app]' (or run `make app`)")
    from dataclasses import replace

    from client.app import run
    from client.app.settings import load_settings, save_settings, url_problem

    folder = folder or Path(typer.get_app_dir("fleet-app"))
    settings = load_settings(folder)
    if server is not None or enrollment_key is not None:
        if server and url_problem(server):
            raise typer.BadParameter(url_problem(server) or "", param_hint="--server")
        key = enrollment_key if enrollment_key is not None else settings.enrollment_key
        settings = settings.with_server(server or settings.server_url, key)
    if data is not None:
        settings = replace(settings, data_path=str(data.resolve()))
    save_settings(folder, settings)
    run(folder, size=(420, 780))


@app.command()
def demo(
    devices: int = 20,
    minutes: float = 3.0,
    model: str = "mnist_cnn",
    target: Annotated[float, typer.Option(help="stop once test accuracy reaches this")] = 0.92,
    port: int = 8765,
    workdir: Path = Path("var/demo"),
    learning_rate: Annotated[
        float | None, typer.Option(help="default: the default strategy's own rate, untuned")
    ] = None,
    strategy: Annotated[str | None, typer.Option(help="default: Fleet's default strategy")] = None,
    seed: int = 0,
    linger: Annotated[
        float | None, typer.Option(help="keep the coordinator up this many s after the run (default: Ctrl-C)")
    ] = None,
    dp_epsilon: Annotated[
        float | None,
        typer.Option(
            min=0.01, max=100, help="DP-SGD on every phone with this ε budget per device (δ = 1e-8)"
        ),
    ] = None,
    dp_tasks: Annotated[
        int | None,
        typer.Option(min=1, help="with --dp-epsilon: σ lets exactly this many tasks fit (default 300)"),
    ] = None,
    dp_batch: Annotated[
        int | None, typer.Option(min=1, help="with --dp-epsilon: the batch B each task samples (default 10)")
    ] = None,
    attackers: Annotated[int, typer.Option(min=0, help="how many phones are Byzantine")] = 0,
    attack: Annotated[
        str, typer.Option(help="with --attackers: sign-flip, alie, ipm, backdoor... (client/_attacks/)")
    ] = "sign-flip",
    kardam: Annotated[bool, typer.Option(help="Kardam's Byzantine filters around the strategy")] = False,
    robust: Annotated[
        bool, typer.Option(help="the recommended robust configuration (docs/results/robust.md)")
    ] = False,
    scenario: Annotated[
        str, typer.Option(help="mnist, or drift: a recommender stream (fleet/demo_drift.py)")
    ] = "mnist",
    seconds_per_hour: Annotated[float, typer.Option(min=0.1, help="drift: real s per simulated hour")] = 4.0,
    phones: Annotated[
        bool,
        typer.Option(
            help="real phones join by a QR code (the coordinator listens on the network); "
            "training goes on past the target"
        ),
    ] = False,
) -> None:
    """Train a model on non-IID MNIST (or, --scenario drift, a drifting recommender stream) with a fleet
    of emulated phones through the real REST API."""
    from dataclasses import replace

    from fleet.demo import DemoConfig, run_demo

    if scenario == "drift" and phones:
        raise typer.BadParameter("phones join the MNIST demo (the default scenario)", param_hint="--phones")
    if scenario == "drift":  # fleet/demo_drift.py: --minutes of a recommender stream, no MNIST options
        from fleet.demo_drift import DriftConfig, run_drift

        drift = DriftConfig(devices, minutes, seconds_per_hour, port, workdir, learning_rate, strategy, seed)
        raise typer.Exit(run_drift(replace(drift, linger=linger)))
    if scenario != "mnist":
        raise typer.BadParameter("mnist or drift", param_hint="--scenario")
    raise typer.Exit(
        run_demo(
            DemoConfig(
                devices=devices,
                minutes=minutes,
                model=model,
                target=target,
                port=port,
                workdir=workdir,
                learning_rate=learning_rate,
                strategy=strategy,
                seed=seed,
                linger=linger,
                dp_epsilon=dp_epsilon,
                dp_tasks=dp_tasks,
                dp_batch=dp_batch,
                attackers=attackers,
                attack=attack.lower(),  # --attack ALIE, as the papers write it
                kardam=kardam,
                robust=robust,
                phones=phones,
            )
        )
    )


app.command()(simulate)  # fleet/simulate.py: its many options live there


def checkout_root() -> Path | None:
    """The source checkout this package runs from, when the lab sits beside it (not in an installed wheel)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "lab" / "runner.py").exists() else None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def experiment(ctx: typer.Context) -> None:
    """Run a lab experiment from a checkout: `fleet experiment default-search` is `python -m lab run
    default-search` (the wheel never imports the lab; it starts it as its own process)."""
    root = checkout_root()
    if root is None or not ctx.args:
        typer.echo("`fleet experiment NAME` is `python -m lab run NAME`, from a checkout (not in the wheel).")
        raise typer.Exit(2)
    raise typer.Exit(subprocess.call([sys.executable, "-m", "lab", "run", *ctx.args], cwd=root))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, hidden=True)
def bench(ctx: typer.Context) -> None:
    """Moved: benchmarks are the lab's (python -m lab run NAME), outside the wheel."""
    name = "privacy-audit" if ctx.args[:1] == ["privacy-audit"] else "NAME"  # issue 27's audit, by name
    typer.echo(f"`fleet bench` moved out of the package: from a checkout, `python -m lab run {name}`.")
    raise typer.Exit(2)


if __name__ == "__main__":
    app()
