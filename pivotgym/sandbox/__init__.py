"""Sandboxes for running untrusted code (model-written patches, tests of mutated repositories).

Backends, registered through the ``register_sandboxes`` hook by the core's built-in plugin:

* ``bwrap`` (default): bubblewrap namespaces, no network, read-only system, writes only in the work dir;
* ``docker``: a fresh container per run (needs the docker SDK and a reachable engine);
* ``local``: no isolation, rlimits and a deadline only (explicit opt-in; warns).

``get_sandbox()`` returns the default backend (``PIVOTGYM_SANDBOX`` overrides it).
"""

from __future__ import annotations

import os
from typing import Any

from pivotgym.sandbox.base import Limits, Mount, RunResult, Sandbox, SandboxError, SandboxUnavailable
from pivotgym.sandbox.fork import fork_dir, remove_dir

DEFAULT_BACKEND = "bwrap"
ENV_BACKEND = "PIVOTGYM_SANDBOX"


def get_sandbox(name: str | None = None, **kwargs: Any) -> Sandbox:
    """Build the sandbox backend ``name`` (default: ``$PIVOTGYM_SANDBOX`` or ``bwrap``) through the registry."""
    from pivotgym.registry import get_registry

    name = name or os.environ.get(ENV_BACKEND) or DEFAULT_BACKEND
    return get_registry().make_sandbox(name, **kwargs)


__all__ = ["DEFAULT_BACKEND", "Limits", "Mount", "RunResult", "Sandbox", "SandboxError", "SandboxUnavailable",
           "fork_dir", "get_sandbox", "remove_dir"]
