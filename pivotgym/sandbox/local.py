"""The ``local`` backend: rlimits and a deadline only, no isolation at all. Explicit opt-in, with a warning.

Use it where neither bubblewrap nor Docker exists and the code run is trusted (your own tests). The command
can read and write anything the host user can, and reach the network. A shell command too long for an argument
is written to a private temporary file on the host, sourced by ``/bin/sh -c '. FILE'`` and deleted after.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pivotgym.sandbox.base import (
    Command,
    Limits,
    Mount,
    RunResult,
    Sandbox,
    base_env,
    command_argv,
    command_text,
    run_process,
    script_argv,
    script_of,
)


class UnsafeSandboxWarning(UserWarning):
    """Emitted when the no-isolation ``local`` backend is created."""


@dataclass
class LocalSandbox(Sandbox):
    limits: Limits = field(default_factory=Limits)
    warn: bool = True
    name = "local"

    def __post_init__(self) -> None:
        if self.warn:
            warnings.warn(
                "the 'local' sandbox does not isolate anything: commands can read and write host "
                "files and use the network. Use 'bwrap' (default) or 'docker' for untrusted code.",
                UnsafeSandboxWarning,
                stacklevel=3,
            )

    def _run(
        self,
        cmd: Command,
        workdir: Path,
        limits: Limits,
        env: Mapping[str, str] | None,
        stdin: str | None,
        mounts: Sequence[Mount] = (),
        hide: Sequence[str] = (),
    ) -> RunResult:
        # no mounts (callers pass host paths) and nothing hidden: the command sees the host filesystem as it is
        script = script_of(cmd)
        path = None
        if script is not None:
            fd, path = tempfile.mkstemp(prefix="pivotgym-command-", suffix=".sh")
            with os.fdopen(fd, "wb") as fh:
                fh.write(script)
        try:
            return run_process(
                script_argv(path) if path is not None else command_argv(cmd),
                cwd=workdir,
                limits=limits,
                env=base_env(workdir, env),
                stdin=stdin,
                backend=self.name,
                command=command_text(cmd),
                watch=workdir,
                shared_uid=True,  # every local run is the host user
            )
        finally:
            if path is not None:
                os.unlink(path)
