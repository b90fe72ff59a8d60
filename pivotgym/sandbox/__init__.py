"""Sandboxes for running untrusted code (model-written patches, tests of mutated repositories).

Backends, registered through the ``register_sandboxes`` hook by the core's built-in plugin:

* ``bwrap`` (default): bubblewrap namespaces, no network, read-only system, writes only in the work dir;
* ``docker``: a fresh container per run of a locally built image (needs the ``docker`` client, a reachable
  engine and the base image: ``make docker``);
* ``local``: no isolation, rlimits and a deadline only (explicit opt-in; warns).

Runs cannot hurt each other or the host (see :mod:`pivotgym.sandbox.base`): a cgroup per run caps its memory,
processes and CPU (``Limits.cpu_quota``, 1 CPU by default), each run on a root host has a uid of its own
(:mod:`pivotgym.sandbox.uids`), the work dir is capped in bytes (sparse files at full size) and depth, and every
host-side walk over a work dir is iterative and depth-bounded (:mod:`pivotgym.sandbox.walk`): ``fork_dir``
refuses trees deeper than ``MAX_DEPTH`` with :class:`TreeTooDeep`, ``remove_dir`` removes any tree and never
raises.

``get_sandbox()`` returns the default backend (``PIVOTGYM_SANDBOX`` overrides it). This package sits below the
registry and never imports it: the registry installs its ``make_sandbox`` here (:func:`set_sandbox_maker`) when
it is imported, which ``import pivotgym`` always does, so plugin backends are found by name too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pivotgym.sandbox.base import Limits, Mount, RunResult, Sandbox, SandboxError, SandboxUnavailable
from pivotgym.sandbox.bwrap import MOUNT_POINT, BwrapSandbox, visible_roots
from pivotgym.sandbox.docker import DockerSandbox
from pivotgym.sandbox.fork import fork_dir, remove_dir
from pivotgym.sandbox.hide import find_named
from pivotgym.sandbox.walk import MAX_DEPTH, TreeTooDeep, remove_at

DEFAULT_BACKEND = "bwrap"
ENV_BACKEND = "PIVOTGYM_SANDBOX"


#: builds a backend by name; installed by :mod:`pivotgym.registry` (the low layer must not import it)
_maker: list[Callable[..., Sandbox]] = []


def set_sandbox_maker(maker: Callable[..., Sandbox]) -> None:
    """Install the function ``get_sandbox`` builds backends with: ``maker(name, **kwargs)``."""
    _maker[:] = [maker]


def get_sandbox(name: str | None = None, **kwargs: Any) -> Sandbox:
    """Build the sandbox backend ``name`` (default: ``$PIVOTGYM_SANDBOX`` or ``bwrap``) through the registry."""
    if not _maker:
        raise SandboxError("no sandbox registry is installed: `import pivotgym` first (it loads the backends)")
    name = name or os.environ.get(ENV_BACKEND) or DEFAULT_BACKEND
    return _maker[0](name, **kwargs)


__all__ = [
    "DEFAULT_BACKEND",
    "MAX_DEPTH",
    "MOUNT_POINT",
    "BwrapSandbox",
    "DockerSandbox",
    "Limits",
    "Mount",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "TreeTooDeep",
    "find_named",
    "fork_dir",
    "get_sandbox",
    "remove_at",
    "remove_dir",
    "set_sandbox_maker",
    "visible_roots",
]
