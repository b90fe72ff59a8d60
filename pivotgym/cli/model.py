"""``pivotgym model pull [NAME]`` and ``pivotgym model list``: the bundled models and their cache."""

from __future__ import annotations

import time
from typing import Any

import typer

from pivotgym.cli.output import CLIError, emit_json, table

model_app = typer.Typer(help="Bundled models: convert once into the cache, list what is there.", no_args_is_help=True)


def _status(alias: str) -> dict[str, Any]:
    from pivotgym.sampling.models import BUNDLED_MODELS, DEFAULT_MODEL, is_converted, model_dir

    spec = BUNDLED_MODELS[alias]
    return {
        **spec.to_dict(),
        "default": alias == DEFAULT_MODEL,
        "converted": is_converted(alias),
        "path": str(model_dir(alias)),
    }


@model_app.command("pull")
def pull_cmd(
    name: str = typer.Argument(None, help="Bundled model alias or Hugging Face hub id (default: the default model)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Convert a bundled model's GGUF into a cached safetensors folder, or download a hub id into the Hugging
    Face cache (naming it is the opt-in to download; instant when already there)."""
    from pivotgym.sampling.models import (
        BUNDLED_MODELS,
        DEFAULT_MODEL,
        ModelError,
        cached_hub_model,
        is_converted,
        pull_model,
    )

    alias = name or DEFAULT_MODEL
    bundled = alias in BUNDLED_MODELS
    cached = is_converted(alias) if bundled else cached_hub_model(alias) is not None
    start = time.perf_counter()
    try:
        path = pull_model(alias, progress=not as_json)
    except ModelError as exc:
        cause = exc.__cause__
        raise CLIError(str(exc), hint=str(cause) if cause else None) from exc
    seconds = time.perf_counter() - start
    if as_json:
        status = _status(alias) if bundled else {"alias": alias, "hub": True}
        emit_json({**status, "path": str(path), "already_cached": cached, "seconds": round(seconds, 3)})
    else:
        typer.echo(f"{alias}: {'already in the cache' if cached else f'ready in {seconds:.1f}s'} -> {path}")


@model_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the bundled models, whether each is converted, and where."""
    from pivotgym.sampling.models import BUNDLED_MODELS

    rows = [_status(alias) for alias in sorted(BUNDLED_MODELS)]
    if as_json:
        emit_json(rows)
        return
    typer.echo(
        table(
            [
                [
                    r["alias"] + (" (default)" if r["default"] else ""),
                    r["requirement"],
                    "yes" if r["converted"] else "no",
                    r["path"],
                ]
                for r in rows
            ],
            ["model", "package", "converted", "path"],
        )
    )


def register(app: typer.Typer) -> None:
    """Add the ``model`` group."""
    app.add_typer(model_app, name="model")
