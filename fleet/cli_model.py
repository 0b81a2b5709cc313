"""`fleet model`: export torch models to checked ONNX bundles, check a bundle, push one to a coordinator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

model_app = typer.Typer(help="Export and push models.", no_args_is_help=True)


@model_app.command("export")
def model_export(
    names: Annotated[list[str] | None, typer.Argument(help="built-in models (default: all)")] = None,
    out: Path = Path("var/models"),
    seed: int = 0,
    module: Annotated[
        str | None, typer.Option(help="your own model: 'package.module:Factory' returning a torch.nn.Module")
    ] = None,
    input_shape: Annotated[
        str | None, typer.Option(help="with --module: one example's shape, e.g. 1,28,28")
    ] = None,
    classes: Annotated[int | None, typer.Option(help="with --module: number of classes")] = None,
    name: Annotated[
        str | None, typer.Option(help="with --module: model name (default: the factory's)")
    ] = None,
) -> None:
    """Export torch models to checked ONNX bundles (needs the `export` extra: torch).

    Built-ins are written to OUT/NAME; a --module model to OUT itself. Gradients are checked against
    torch autograd and the bundle against the coordinator's validation before anything is written."""
    from models.export import build_from_factory, export_bundle, export_module, load_factory
    from models.zoo import BUILTINS

    if module is None:
        if input_shape is not None or classes is not None or name is not None:
            raise typer.BadParameter("--input-shape, --classes and --name go with --module")
        for builtin_name in names or sorted(BUILTINS):
            path = export_bundle(builtin_name, out / builtin_name, seed=seed)
            typer.echo(f"exported {builtin_name} → {path}")
        return
    if names:
        raise typer.BadParameter("give built-in names or --module, not both")
    if input_shape is None or classes is None:
        raise typer.BadParameter("--module needs --input-shape (e.g. 1,28,28) and --classes")
    try:
        shape = tuple(int(d) for d in input_shape.split(","))
        factory = load_factory(module)
    except (ValueError, ImportError, AttributeError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    model_name = name or getattr(factory, "__name__", "model")
    try:
        path = export_module(
            build_from_factory(factory, seed=seed),
            out,
            name=model_name,
            input_shape=shape,
            num_classes=classes,
        )
    except ValueError as exc:
        typer.echo(f"export failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"exported {model_name} → {path} (gradients match autograd; bundle check passed)")


@model_app.command("check")
def model_check(
    bundle: Annotated[Path, typer.Argument(help="bundle directory or zip", exists=True)],
) -> None:
    """Run the coordinator's own bundle validation (no torch needed); exit 1 with the reason if it fails."""
    from models.check import BundleError, load_checked

    try:
        checked = load_checked(bundle)
    except BundleError as exc:
        typer.echo(f"invalid bundle: {exc}", err=True)
        raise typer.Exit(1) from exc
    m = checked.manifest
    typer.echo(
        f"ok: {m.name}, {m.num_params} parameters, input {list(m.input_shape)}, {m.num_classes} classes"
    )


@model_app.command("push")
def model_push(
    bundle: Annotated[Path, typer.Argument(help="bundle directory or zip")],
    server: str = "http://127.0.0.1:8000",
    admin_token: Annotated[str, typer.Option(envvar="FLEET_ADMIN_TOKEN")] = "",
) -> None:
    """Upload a bundle; the coordinator trains it from now on."""
    import httpx

    from models.manifest import Bundle

    data = Bundle.load(bundle).to_zip()
    response = httpx.post(
        f"{server}/v1/admin/models",
        files={"bundle": ("bundle.zip", data, "application/zip")},
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=60,
    )
    if response.status_code >= 400:
        raise typer.BadParameter(f"{response.status_code}: {response.text}")
    typer.echo(response.text)
