"""``pivotgym sandbox status`` and ``pivotgym sandbox build``: which sandbox backends can run here, and the
docker backend's base image, built from Debian packages (no registry; see :mod:`pivotgym.sandbox.images`)."""

from __future__ import annotations

from typing import Any

import typer

from pivotgym.cli.output import CLIError, emit_json, table

sandbox_app = typer.Typer(
    help="Sandbox backends: what runs here, and the docker backend's images.", no_args_is_help=True
)


def backend_status() -> list[dict[str, Any]]:
    """Every registered backend: whether it can run here and, where it cannot, why."""
    import warnings

    from pivotgym.errors import SandboxError
    from pivotgym.registry import get_registry
    from pivotgym.sandbox import get_sandbox

    rows = []
    for name in sorted(get_registry().sandboxes):
        row: dict[str, Any] = {"backend": name, "available": True, "problem": ""}
        try:
            with warnings.catch_warnings():  # `local` warns that it isolates nothing: the table says what runs
                warnings.simplefilter("ignore")
                box = get_sandbox(name)
            check = getattr(box, "check", None)
            if callable(check):
                check()
            row.update({k: v for k, v in box.describe().items() if k in ("image",)})
        except SandboxError as exc:
            row.update(available=False, problem=str(exc))
        rows.append(row)
    return rows


@sandbox_app.command("status")
def status_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the sandbox backends and whether each can run here (and why not)."""
    rows = backend_status()
    if as_json:
        emit_json(rows)
        return
    typer.echo(
        table(
            [[r["backend"], "yes" if r["available"] else "no", r.get("image", "-"), r["problem"] or "-"] for r in rows],
            ["backend", "runs here", "image", "problem"],
        )
    )


@sandbox_app.command("build")
def build_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Build the docker backend's base image from Debian packages (debootstrap + docker import; needs root and a
    running engine). Does nothing when the image of the current recipe is there."""
    from pivotgym.errors import SandboxError
    from pivotgym.sandbox.images import BaseRecipe, engine_problem, ensure_base_image

    problem = engine_problem()
    if problem is not None:
        raise CLIError(problem, hint="`make docker` installs and starts the engine where this machine allows it")
    recipe = BaseRecipe()
    try:
        tag = ensure_base_image(recipe, log=lambda line: typer.echo(line, err=True))
    except SandboxError as exc:
        raise CLIError(str(exc)) from None
    if as_json:
        emit_json({"image": tag, "recipe": recipe.digest})
    else:
        typer.echo(f"{tag} (recipe {recipe.digest}) is ready")


def register(app: typer.Typer) -> None:
    """Add the ``sandbox`` group."""
    app.add_typer(sandbox_app, name="sandbox")
