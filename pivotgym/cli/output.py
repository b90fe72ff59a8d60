"""What every command shares: JSON and table output, and the one-line error every failure prints.

The command modules of :mod:`pivotgym.cli` import these (and only these) from each other's package, so no
command depends on another command's module.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from pivotgym.errors import PivotgymError


class CLIError(PivotgymError):
    """An error meant for the user: printed as one ``error:`` line, with the optional hint on the same line."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)


def emit_json(data: Any) -> None:
    """Print stable, indented JSON to stdout (the ``--json`` output of every command)."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def table(rows: list[list[Any]], header: list[str]) -> str:
    """Left-aligned columns under ``header`` and a dashed rule, trailing spaces stripped."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def hint_for(exc: BaseException) -> str | None:
    """What to do about ``exc``, when its message does not already say it.

    An error raised on purpose (:class:`~pivotgym.errors.PivotgymError`, :class:`CLIError` included) carries
    its own ``hint``, or none when the message names the fix; anything else may be a bug, so the hint is the
    traceback.
    """
    if isinstance(exc, PivotgymError):
        return exc.hint
    if isinstance(exc, FileNotFoundError):
        return "check the path"
    return "run again with --debug for the traceback"


def error_line(exc: BaseException) -> str:
    """The single line a failed command prints: ``error: MESSAGE (hint: HINT)``.

    A message spanning lines is joined into one, so a wrapped error never looks like two.
    """
    message = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and exc.args:
        message = str(exc.args[0])
    message = " ".join(part.strip() for part in message.splitlines() if part.strip()) or type(exc).__name__
    hint = hint_for(exc)
    return f"error: {message} (hint: {hint})" if hint else f"error: {message}"
