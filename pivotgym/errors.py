"""Every error pivotgym raises on purpose, under one base class.

Catch :class:`PivotgymError` to catch anything the toolkit reports deliberately (a bad config, an unknown id,
a sandbox that cannot start); anything else is a bug. Each class also derives from the built-in exception a
caller would have caught before it existed (``ValueError`` for bad input, ``LookupError`` for unknown ids,
``RuntimeError`` for an unusable backend), so ``except ValueError`` keeps working.

Messages name the thing that is wrong (file and line, field, id, plugin) and, where the fix is not obvious,
end with what to do; ``hint`` carries a separate suggestion the command line prints beside the message.

Plugins raise these too (``from pivotgym.errors import ConfigError``) or subclass :class:`PivotgymError`.
"""

from __future__ import annotations

__all__ = [
    "AdhocTurn",
    "ConfigError",
    "InvalidAction",
    "JsonlError",
    "ModelError",
    "ParseError",
    "PivotgymError",
    "RecordError",
    "RegistryError",
    "ResultMismatch",
    "SamplerError",
    "SandboxError",
    "SandboxUnavailable",
    "StageChanged",
    "TaskNotFound",
]


class PivotgymError(Exception):
    """The base of every error pivotgym raises on purpose.

    ``hint`` is an optional, separate suggestion (the command line prints ``error: MESSAGE (hint: HINT)``).
    """

    def __init__(self, message: str = "", *args: object, hint: str | None = None) -> None:
        super().__init__(message, *args)
        self.hint = hint


class ConfigError(PivotgymError, ValueError):
    """A config file or mapping (experiment, trainer, YAML env or suite) is malformed: an unknown key, a value
    of the wrong type or out of range. The message starts with ``FILE:LINE: section.field:`` where known."""


class RecordError(PivotgymError, ValueError):
    """A row or mapping lacks a required field or holds a value of the wrong type; the message names the
    field (readers prefix the file and line)."""


class JsonlError(PivotgymError, ValueError):
    """A JSON-lines file cannot be read as the records it should hold; the message names file and line."""


class RegistryError(PivotgymError, LookupError):
    """An env, verifier, suite, sampler or sandbox id is unknown, or its plugin failed to load; the message
    says which and how to list what exists."""


class StageChanged(PivotgymError):
    """An experiment stage already ran under different inputs than the current config asks for; the message
    names the stage and the changed fields and says how to proceed (``--rerun STAGE`` or a new run folder)."""


class TaskNotFound(PivotgymError, KeyError):
    """A task id is not in the env's splits."""

    def __str__(self) -> str:  # KeyError quotes its argument; say the message as written
        return str(self.args[0]) if self.args else "task not found"


class InvalidAction(PivotgymError):
    """An action the env cannot carry out. The env turns it into an error observation with reward 0.

    ``message`` is shown to the agent, so say what was wrong and how to write it correctly.
    """

    def __init__(self, message: str, *, code: str = "invalid_action") -> None:
        super().__init__(message)
        self.code = code


class SandboxError(PivotgymError, RuntimeError):
    """A sandbox could not run a command at all (missing backend, bad work dir)."""


class SandboxUnavailable(SandboxError):
    """The backend is not usable on this machine; the message says how to install or enable it."""


class SamplerError(PivotgymError, RuntimeError):
    """A sampler could not produce completions (bad request, engine failure)."""


class ModelError(PivotgymError, RuntimeError):
    """A model name or folder cannot be resolved or loaded; the message says how to get it."""


class AdhocTurn(TaskNotFound):
    """A verifier asked for the env state or task of an ad-hoc turn (one judged without a task of the env,
    e.g. ``pivotgym verify`` without ``task_id``); there is none to replay. Verifiers check
    ``context.known_task()`` and judge such turns from ``context.prefix`` and ``context.expert``."""


class ResultMismatch(PivotgymError, ValueError):
    """Two results cannot be compared: they come from different suites, or a member was scored with a
    different metric or on different items; the message names the first such member and what differs."""


class ParseError(PivotgymError, ValueError):
    """Assistant text that tries to call a tool but cannot be read (or hostile input: deep nesting, huge
    integers, lone surrogates); the message says what is wrong and how to write the call."""
