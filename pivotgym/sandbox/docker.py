"""The ``docker`` backend: each run is a fresh container of a locally built image, driven by the ``docker`` client.

What a command sees and may do:

* the image's filesystem, read-only (``--read-only``), never the host's: the default image is
  :data:`~pivotgym.sandbox.images.BASE_IMAGE`, built from Debian packages on this machine (``make docker``);
  nothing is ever pulled (``--pull never``), and a missing image is an error naming the command that builds it;
* the work dir bind-mounted read-write at ``/repo`` and a size-capped tmpfs at ``/tmp``; ``python_roots`` (host
  trees such as a Python runtime built on the host, bound read-only at their own path, as bubblewrap shows
  them); extra :class:`~pivotgym.sandbox.base.Mount` s on top (read-only unless marked); a shell command too
  long for an argument is bound read-only at ``/.pivotgym-command.sh`` and sourced from there;
* no network (``--network none``), no capabilities, ``no-new-privileges``;
* a uid of its own on a root host (the same pool as bubblewrap, :mod:`pivotgym.sandbox.uids`; the work dir is
  handed to it), so its files and processes are no other run's;
* limits: the memory of all its processes together (``--memory``, no swap), processes and threads
  (``--pids-limit``), CPUs (``--cpus``), CPU seconds and file size per process (ulimits), the work dir's bytes
  (polled from the host, :mod:`pivotgym.sandbox.disk`), the wall clock. When one is hit the result's
  ``limit_hit`` says which, as on the other backends.

The container is created by ``docker run`` under the shared process handling of
:func:`~pivotgym.sandbox.base.run_process` (stdin, output caps, the deadline, the disk watch), and removed with
``docker rm --force`` whatever happened: at the deadline, on an exception, when the run ends. An engine that
cannot create or start the container raises :class:`~pivotgym.errors.SandboxError` with the engine's words (the
run never started: not the command's doing); a container the engine cannot remove is reported in ``stderr``
and retried when the process exits. ``hide`` names host paths, which a container does not see, so there is
nothing to hide.
"""

from __future__ import annotations

import atexit
import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.errors import SandboxError
from pivotgym.sandbox import uids
from pivotgym.sandbox.base import (
    Command,
    Limits,
    Mount,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    command_argv,
    command_text,
    run_process,
    script_argv,
    script_of,
)
from pivotgym.sandbox.images import (
    BASE_IMAGE,
    BUILD_COMMAND,
    BaseRecipe,
    docker,
    docker_cli,
    engine_problem,
    image_exists,
    image_label,
    missing_image_message,
)

MOUNT_POINT = "/repo"
SCRIPT_PATH = "/.pivotgym-command.sh"
CONTAINER_LABEL = "org.pivotgym.sandbox"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REMOVE_TIMEOUT = 60.0
ENGINE_EXIT = 125  # docker run's own failure (the container was not created or not started)

#: containers that ``docker rm`` could not remove yet: retried at exit
_UNREMOVED: set[str] = set()


def unavailable_reason(image: str = BASE_IMAGE) -> str | None:
    """Why the docker backend cannot run ``image`` here (no client, no engine, no such image), or None."""
    problem = engine_problem()
    if problem is None and not image_exists(image):
        problem = missing_image_message(image)
    elif problem is None and image == BASE_IMAGE and image_label(image) != BaseRecipe().digest:
        problem = f"the Docker image {image} was built from an older recipe; rebuild it with `{BUILD_COMMAND}`"
    return problem


def docker_available(image: str = BASE_IMAGE) -> bool:
    """Whether a Docker engine answers here and has ``image`` (see :func:`unavailable_reason`)."""
    return unavailable_reason(image) is None


@dataclass
class DockerSandbox(Sandbox):
    """Run commands in fresh containers of ``image`` (default: the locally built Debian base image)."""

    limits: Limits = field(default_factory=Limits)
    image: str = BASE_IMAGE
    network: bool = False
    uid_pool: bool = True  # on a root host, each run gets a uid of its own (else the image's user)
    #: host trees bound read-only at their own path (a Python runtime built on the host); None binds none
    python_roots: Sequence[str] | None = None
    name = "docker"

    def __post_init__(self) -> None:
        self._ready: set[str] = set()

    def check(self, image: str | None = None) -> None:
        """Raise :class:`SandboxUnavailable` saying how to fix it when the engine or ``image`` is missing
        (checked once per image and sandbox)."""
        image = image or self.image
        if image in self._ready:
            return
        problem = unavailable_reason(image)
        if problem is not None:
            raise SandboxUnavailable(problem)
        self._ready.add(image)

    def run_options(self, limits: Limits) -> list[str]:
        """The ``docker run`` options that enforce ``limits`` (engine-free; unit-tested)."""
        options = [
            "--network",
            "bridge" if self.network else "none",
            "--read-only",
            "--tmpfs",
            f"/tmp:rw,nosuid,nodev,size={limits.file_size_bytes or (256 << 20)},mode=1777",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--ulimit",
            "core=0:0",
        ]
        if limits.cpu_seconds:
            options += ["--ulimit", f"cpu={int(limits.cpu_seconds)}:{int(limits.cpu_seconds)}"]
        if limits.file_size_bytes:
            options += ["--ulimit", f"fsize={int(limits.file_size_bytes)}:{int(limits.file_size_bytes)}"]
        memory = limits.total_memory_bytes or limits.memory_bytes  # a container is one cgroup: the sum is capped
        if memory:
            options += ["--memory", str(int(memory)), "--memory-swap", str(int(memory))]
        if limits.max_processes:
            options += ["--pids-limit", str(int(limits.max_processes))]
        if limits.cpu_quota:
            options += ["--cpus", f"{limits.cpu_quota:g}"]
        return options

    def run_in_image(
        self,
        image: str,
        cmd: Command,
        *,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        mounts: Sequence[Mount] = (),
        workdir: str | None = None,
        read_only: bool = False,
    ) -> RunResult:
        """Run ``cmd`` in a fresh container of ``image`` with no host work dir (SWE-bench images carry their
        repository at ``/testbed``), as the image's user, with a writable root unless ``read_only``."""
        return self._container(
            image, cmd, limits or self.limits, env, stdin, mounts, workdir=workdir, read_only=read_only, host=None
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
        roots = [Mount(root, root) for root in self.python_roots or ()]
        return self._container(
            self.image, cmd, limits, env, stdin, [*roots, *mounts], workdir=MOUNT_POINT, read_only=True, host=workdir
        )

    def _container(
        self,
        image: str,
        cmd: Command,
        limits: Limits,
        env: Mapping[str, str] | None,
        stdin: str | None,
        mounts: Sequence[Mount],
        *,
        workdir: str | None,
        read_only: bool,
        host: Path | None,
    ) -> RunResult:
        self.check(image)
        name = _name_prefix() + secrets.token_hex(6)
        argv = [docker_cli(), "run", "--name", name, "--label", f"{CONTAINER_LABEL}=1", "--pull", "never"]
        argv += ["--log-driver", "none", "--init"]
        if stdin is not None:
            argv.append("--interactive")
        argv += self.run_options(limits)
        if not read_only:
            argv.remove("--read-only")
        lease = None
        script_file = None
        try:
            if host is not None:
                if self.uid_pool and os.geteuid() == 0:
                    from pivotgym.sandbox.bwrap import chown_tree

                    lease = uids.lease(prefer=host.stat().st_uid)
                    chown_tree(host, lease.uid, lease.uid)
                    for mount in mounts:
                        if mount.writable:
                            chown_tree(Path(mount.source), lease.uid, lease.uid)
                    argv += ["--user", f"{lease.uid}:{lease.uid}"]
                argv += ["--volume", f"{host}:{MOUNT_POINT}:rw"]
            for mount in mounts:
                argv += ["--volume", f"{mount.source}:{mount.target}:{'rw' if mount.writable else 'ro'}"]
            script = script_of(cmd)
            if script is not None:  # too long for an argument: a read-only file the shell sources
                script_file = tempfile.NamedTemporaryFile(prefix="pivotgym-cmd-", suffix=".sh", delete=False)
                script_file.write(script)
                script_file.close()
                os.chmod(script_file.name, 0o444)
                argv += ["--volume", f"{script_file.name}:{SCRIPT_PATH}:ro"]
            environment = {
                "PATH": IMAGE_PATH,
                "HOME": workdir or "/tmp",
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "TMPDIR": "/tmp",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0",
                **(env or {}),
            }
            for key, value in environment.items():
                argv += ["--env", f"{key}={value}"]
            if workdir:
                argv += ["--workdir", workdir]
            argv.append(image)
            argv += script_argv(SCRIPT_PATH) if script is not None else command_argv(cmd)
            # the client itself is not limited (the container is); the deadline, output caps and disk watch are
            client_limits = Limits(
                wall_seconds=limits.wall_seconds,
                cpu_seconds=None,
                memory_bytes=None,
                max_processes=None,
                file_size_bytes=None,
                output_bytes=limits.output_bytes,
                disk_bytes=limits.disk_bytes,
                cpu_quota=None,
            )
            result = run_process(
                argv,
                cwd=None,
                limits=client_limits,
                env=_client_env(),
                stdin=stdin,
                backend=self.name,
                command=command_text(cmd),
                rlimits=False,
                watch=host,
                on_stop=lambda: _kill(name),
            )
            state = _inspect(name)
            _remove(name)
            if result.limit_hit == "disk" or result.timed_out:
                return result  # stopped by the host; what the engine did after that does not matter
            what = _not_a_result(state)
            if what:
                raise SandboxError(
                    f"the Docker engine {what}; `docker run` exited {result.returncode}: "
                    + (result.stderr.strip()[-800:] or "no message")
                )
            assert state is not None  # a missing state is a reason above
            if state.get("oom") and not result.limit_hit:
                memory = limits.total_memory_bytes or limits.memory_bytes or 0
                result.limit_hit = "memory"
                result.limit_message = (
                    f"memory limit hit: the processes of one command may use {memory >> 20} MiB together, "
                    "and the kernel killed one; use less memory (fewer or smaller processes)"
                )
            return result
        except BaseException:
            _remove(name)
            raise
        finally:
            if lease is not None:
                lease.release()
            if script_file is not None:
                os.unlink(script_file.name)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "image": self.image, "network": self.network}


def _client_env() -> dict[str, str]:
    """What the ``docker`` client needs from our environment (the engine's address, its config), nothing else."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _not_a_result(state: dict[str, Any] | None) -> str:
    """What went wrong on the engine's side when ``docker run`` ended without the command's result (a
    container never started, lost, or still running after its client ended), or "" when it ended normally."""
    if state is None:
        return "lost the container (is the engine still up?)"
    if not state["started"]:
        return "could not start the container"
    if state["running"]:
        return "client lost the container while it ran, so its result is unknown"
    return ""


def _inspect(name: str) -> dict[str, Any] | None:
    """Whether container ``name`` started, whether the kernel OOM-killed in it and whether it still runs (None:
    no such container, or no engine to ask)."""
    try:
        done = docker("inspect", "--format", "{{.State.StartedAt}} {{.State.OOMKilled}} {{.State.Running}}", name)
    except SandboxError:
        return None
    if done.returncode != 0:
        return None
    started, oom, running = (done.stdout.decode().split() + ["", "", ""])[:3]
    return {"started": not started.startswith("0001-"), "oom": oom == "true", "running": running == "true"}


def _kill(name: str) -> None:
    """Stop container ``name`` now (the deadline or the disk watch hit): killing the client does not stop it."""
    try:
        docker("kill", name)
    except (SandboxError, OSError):
        pass  # removed below, or retried at exit


def _remove(name: str) -> None:
    """Remove container ``name`` (killing it first); remembered for a retry at exit when the engine refuses."""
    try:
        done = docker("rm", "--force", "--volumes", name, timeout=REMOVE_TIMEOUT)
        gone = done.returncode == 0 or b"No such container" in done.stderr
    except (SandboxError, OSError):
        gone = False
    if gone:
        _UNREMOVED.discard(name)
    else:
        _UNREMOVED.add(name)


@atexit.register
def _remove_leftovers() -> None:
    for name in list(_UNREMOVED):
        _remove(name)


def leftover_containers() -> list[str]:
    """Names of this process's containers the engine has not removed (normally none)."""
    return sorted(_UNREMOVED)


def running_sandbox_containers(this_process: bool = False) -> list[str]:
    """The names of the containers on the engine that a docker sandbox made, running or not: every process's,
    or with ``this_process`` only this one's (other processes may be running sandboxes meanwhile)."""
    done = docker("ps", "--all", "--format", "{{.Names}}", "--filter", f"label={CONTAINER_LABEL}")
    if done.returncode != 0:
        raise SandboxUnavailable(done.stderr.decode(errors="replace").strip())
    names = done.stdout.decode().split()
    return [n for n in names if n.startswith(_name_prefix())] if this_process else names


def _name_prefix() -> str:
    return f"pivotgym-{os.getpid()}-"


__all__ = [
    "MOUNT_POINT",
    "DockerSandbox",
    "docker_available",
    "leftover_containers",
    "running_sandbox_containers",
    "unavailable_reason",
]
