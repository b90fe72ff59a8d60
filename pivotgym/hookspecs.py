"""The pluggy hook specifications of the ``pivotgym`` project.

Each hook hands the plugin a ``register`` callback; a plugin calls it once per thing it provides. Hooks are
called once per process, lazily, and must be cheap: register factories, do not load data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "pivotgym"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[..., Any]


@hookspec
def register_environments(register: Register) -> None:
    """Envs: ``register(id, factory, *, verifier=None, exact_verifier="exact", splits=None, description="", **kw)``."""


@hookspec
def register_verifiers(register: Register) -> None:
    """Register verifiers: ``register(name, factory, *, description="")``; ``factory(**kw)`` returns a Verifier."""


@hookspec
def register_suites(register: Register) -> None:
    """Register evaluation suites: ``register(name, members, *, description="")`` with members ``{env_id: role}``."""


@hookspec
def register_sandboxes(register: Register) -> None:
    """Register sandbox backends: ``register(name, factory, *, description="")``."""


@hookspec
def register_samplers(register: Register) -> None:
    """Register samplers: ``register(name, factory, *, description="")``; ``factory(model, **kw)`` is a Sampler."""


@hookspec
def register_user_simulators(register: Register) -> None:
    """Register user simulators for conversational envs: ``register(name, factory, *, description="")``;
    ``factory(**options)`` is a :class:`pivotgym.users.UserSimulator`."""


@hookspec
def register_commands(cli: Any) -> None:
    """Add commands to ``pivotgym``: ``cli`` is a ``typer.Typer`` of this plugin's own, whose commands and
    groups join the ``pivotgym`` app. Put a domain's commands in one group named after it
    (``cli.add_typer(app, name="swe")`` gives ``pivotgym swe ...``); a name the core or another plugin took is
    refused and shown by ``pivotgym plugins``. Unlike the other hooks it is called when the command line starts."""
