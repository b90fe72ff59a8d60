"""``pivotgym reasoning ...``: the reasoning domain's commands, each with its own argparse options."""

from __future__ import annotations

import typer

app = typer.Typer(help="The reasoning domain: calibrate each task's level to a model.", no_args_is_help=True)


@app.command(
    "calibrate", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False
)
def calibrate(ctx: typer.Context) -> int:
    """Pick each task's level from a model's accuracy against chance (--help for the options)."""
    from pivotgym_reasoning.calibrate import main

    return main(ctx.args)
