"""The ``pivotgym`` Typer app and ``main``, the console script's entry point.

Each verb group lives in its own module of :mod:`pivotgym.cli` and adds its commands through ``register(app)``;
:data:`COMMAND_GROUPS` fixes their order (the order ``pivotgym --help`` lists them in). Errors print one line
(``--debug`` shows the traceback instead) and exit non-zero; so does any command that reports a failure by
raising ``typer.Exit(code)`` or returning a non-zero integer (:func:`exit_status`).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import typer

from pivotgym.cli import calibrate, data, env, experiment, floors, model, pivot, plugins, sandbox, serve, train, verify
from pivotgym.cli import eval as evaluation
from pivotgym.cli.output import error_line

app = typer.Typer(
    name="pivotgym",
    help="Multi-turn text environments, functional verifiers and the PivotRL method.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: the verb groups, in the order their commands are added to ``app``
COMMAND_GROUPS: tuple[ModuleType, ...] = (
    plugins,
    env,
    evaluation,
    floors,
    experiment,
    data,
    train,
    model,
    pivot,
    verify,
    calibrate,
    sandbox,
    serve,
)

_state: dict[str, Any] = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")) -> None:
    _state["debug"] = debug


for _group in COMMAND_GROUPS:
    _group.register(app)


def _named(cli: typer.Typer) -> list[tuple[Any, str]]:
    """``cli``'s commands and groups with the names they answer to (as typer derives them)."""
    from typer.main import get_command_name

    commands = [(c, c.name or get_command_name(getattr(c.callback, "__name__", ""))) for c in cli.registered_commands]
    return commands + [(g, g.name or "") for g in cli.registered_groups]


def add_plugin_commands(cli: typer.Typer) -> list[str]:
    """Call every plugin's ``register_commands`` hook with a Typer app of its own and add what it registered to
    ``cli``; a command or group whose name is taken is left out and recorded as the plugin's failure (``pivotgym
    plugins`` shows it), as is a hook that raised. Returns the names added."""
    from pivotgym.registry import get_registry

    plugins = get_registry().plugins
    own: dict[str, typer.Typer] = {}

    def kwargs_for(name: str) -> dict[str, Any]:
        return {"cli": own.setdefault(name, typer.Typer())}

    added: list[str] = []
    for plugin in plugins.call_each("register_commands", kwargs_for):
        sub = own[plugin]
        taken = {name for _, name in _named(cli)}
        for info, name in _named(sub):
            if name in taken or not name:
                plugins.infos[plugin].fail(
                    "register_commands", f"the command {name!r} is taken (core or another plugin): not added"
                )
                continue
            target = cli.registered_groups if info in sub.registered_groups else cli.registered_commands
            target.append(info)
            taken.add(name)
            added.append(name)
    return added


add_plugin_commands(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: runs the app and turns exceptions into one-line errors."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _state["debug"] = "--debug" in argv
    try:
        result = app(args=argv, prog_name="pivotgym", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except Exception as exc:
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()  # a usage error from click/typer (typer vendors click): it prints its own usage line
            return code
        if _state["debug"]:
            raise
        typer.echo(error_line(exc), err=True)
        return 1
    return exit_status(result)


def exit_status(result: object) -> int:
    """The process exit status for what the app returned when not in standalone mode.

    Click then *returns* what standalone mode would have passed to ``sys.exit``: the code of a ``typer.Exit``
    raised by a command (``raise typer.Exit(1)`` after printing a FAILED report), or the command's own return
    value. An integer is the status; anything else (``None`` included) means success.
    """
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    return 0
