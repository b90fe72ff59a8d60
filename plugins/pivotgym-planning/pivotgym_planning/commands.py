"""``pivotgym planning ...``: the planning domain's data commands, each with its own argparse options."""

from __future__ import annotations

import typer

app = typer.Typer(help="The planning domain's data: generated problems and the pddlgym manifest.", no_args_is_help=True)

#: the arguments after the command go to its own parser (``--help`` included)
PASSED_ON = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("generate", context_settings=PASSED_ON, add_help_option=False)
def generate(ctx: typer.Context) -> None:
    """Generate (and cache) planning problem splits; --stats measures them (--help for the options)."""
    from pivotgym_planning.generators import main

    main(ctx.args, prog="pivotgym planning generate")


@app.command("manifest", context_settings=PASSED_ON, add_help_option=False)
def manifest(ctx: typer.Context) -> None:
    """Rebuild the problem manifest of the pddlgym families (--help for the options)."""
    from pivotgym_planning.catalog import main

    main(ctx.args, prog="pivotgym planning manifest")
