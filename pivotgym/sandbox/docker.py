"""The ``docker`` backend (docker SDK, ``pip install docker``): each run is a fresh container.

The work dir is bind-mounted at ``/repo``; the container has no network, a read-only root filesystem, a
size-capped ``/tmp``, memory / pids / CPU limits (``cpu_quota`` as ``nano_cpus``), and is killed at the deadline
and removed afterwards. A shell command must fit in one argument (``ARGV_COMMAND_BYTES``); longer ones are refused.
SWE-bench images carry the repository themselves (``/testbed``): :meth:`DockerSandbox.run_in_image` runs a
script in an image with no work dir mounted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.sandbox.base import (
    ARGV_COMMAND_BYTES,
    Command,
    Limits,
    Mount,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    command_argv,
    command_text,
)

MOUNT_POINT = "/repo"


def docker_client(timeout: float = 5.0) -> Any:
    """A connected docker client, or :class:`SandboxUnavailable` saying why there is none."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable("the docker backend needs the docker SDK: `pip install 'pivotgym[docker]'`") from exc
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:
        raise SandboxUnavailable(
            f"no reachable Docker engine ({exc.__class__.__name__}: {exc}); start dockerd or set DOCKER_HOST"
        ) from exc
    return client


def docker_available() -> bool:
    try:
        docker_client(timeout=2.0)
    except SandboxUnavailable:
        return False
    return True


def _truncate(data: bytes, cap: int) -> tuple[str, bool]:
    text = data[:cap].decode("utf-8", errors="replace")
    if len(data) > cap:
        return text + f"\n[... output truncated: {len(data) - cap} more bytes ...]\n", True
    return text, False


@dataclass
class DockerSandbox(Sandbox):
    """Run commands in containers of ``image`` (default: a slim Python image)."""

    limits: Limits = field(default_factory=Limits)
    image: str = "python:3.11-slim"
    network: bool = False
    name = "docker"
    max_command_bytes = ARGV_COMMAND_BYTES  # no script file travels into the container

    def __post_init__(self) -> None:
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    def container_options(self, limits: Limits, env: Mapping[str, str] | None) -> dict[str, Any]:
        """Keyword arguments for ``containers.create`` that enforce ``limits`` (engine-free; unit-tested)."""
        import docker.types as dt

        ulimits = [dt.Ulimit(name="core", soft=0, hard=0)]
        if limits.cpu_seconds:
            ulimits.append(dt.Ulimit(name="cpu", soft=int(limits.cpu_seconds), hard=int(limits.cpu_seconds)))
        if limits.file_size_bytes:
            ulimits.append(dt.Ulimit(name="fsize", soft=int(limits.file_size_bytes), hard=int(limits.file_size_bytes)))
        options: dict[str, Any] = {
            "network_disabled": not self.network,
            "read_only": True,
            "tmpfs": {"/tmp": f"size={limits.file_size_bytes or (256 << 20)}"},
            "ulimits": ulimits,
            "environment": dict(env or {}),
            "detach": True,
        }
        memory = limits.total_memory_bytes or limits.memory_bytes  # a container is one cgroup: the sum is capped
        if memory:
            options["mem_limit"] = int(memory)
            options["memswap_limit"] = int(memory)
        if limits.max_processes:
            options["pids_limit"] = int(limits.max_processes)
        if limits.cpu_quota:
            options["nano_cpus"] = int(limits.cpu_quota * 1e9)
        return options

    def run_in_image(
        self,
        image: str,
        cmd: Command,
        *,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        volumes: Mapping[str, Any] | None = None,
        workdir: str | None = None,
        read_only: bool = False,
    ) -> RunResult:
        """Run ``cmd`` in a fresh container of ``image``; kill it at the deadline; remove it after."""
        limits = limits or self.limits
        options = self.container_options(limits, env)
        options["read_only"] = read_only
        if volumes:
            options["volumes"] = dict(volumes)
        if workdir:
            options["working_dir"] = workdir
        start = time.perf_counter()
        container = self.client.containers.create(image, command_argv(cmd), **options)
        timed_out = False
        try:
            container.start()
            try:
                status = container.wait(timeout=limits.wall_seconds)
                code = int(status.get("StatusCode", -1))
            except Exception:
                timed_out = True
                container.kill()
                code = -9
            out, t1 = _truncate(container.logs(stdout=True, stderr=False) or b"", limits.output_bytes)
            err, t2 = _truncate(container.logs(stdout=False, stderr=True) or b"", limits.output_bytes)
        finally:
            try:
                container.remove(force=True)
            except Exception:
                pass
        return RunResult(code, out, err, timed_out, t1 or t2, time.perf_counter() - start, self.name, command_text(cmd))

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
        # ``hide`` names host paths; a container sees its image, not the host, so there is nothing to hide
        if stdin is not None:
            raise NotImplementedError("the docker backend does not pass stdin; write input to a file in the work dir")
        volumes = {os.fspath(workdir): {"bind": MOUNT_POINT, "mode": "rw"}}
        for mount in mounts:
            volumes[mount.source] = {"bind": mount.target, "mode": "rw" if mount.writable else "ro"}
        return self.run_in_image(
            self.image, cmd, limits=limits, env=env, volumes=volumes, workdir=MOUNT_POINT, read_only=True
        )
