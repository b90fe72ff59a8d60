"""An aggregate memory limit for everything one sandboxed command starts: a memory cgroup per run.

RLIMIT_AS bounds each process, not their sum: three processes of 1.5 GB each fit under a 2 GB rlimit. A
cgroup bounds the sum, and the kernel OOM-kills inside the group when it is exceeded, which
:func:`MemoryCgroup.oom_killed` then reports. Both cgroup v2 (``memory.max``) and the v1 memory hierarchy
(``memory.limit_in_bytes``) are used, whichever this host lets us write. Where neither is writable (an
unprivileged user without a delegated cgroup, most containers), :func:`memory_cgroups_available` is False and
only the per-process rlimit applies; :func:`unavailable_reason` says why.

The command joins the group before it starts: it is wrapped in ``sh -c 'echo $$ > cgroup.procs; exec ...'``,
so every descendant is born inside it.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
_STATE: dict[str, object] = {}


def _own_path(controller: str) -> str:
    """This process's cgroup path in the hierarchy of ``controller`` ('' = v2), from /proc/self/cgroup."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _id, ctrls, path = line.split(":", 2)
            if (controller == "" and _id == "0") or controller in ctrls.split(","):
                return path.lstrip("/")
    except (OSError, ValueError):
        pass
    return ""


def _candidates() -> list[tuple[str, Path]]:
    """(version, parent directory) pairs where a child memory cgroup could be created, best first."""
    out: list[tuple[str, Path]] = []
    v2 = CGROUP_ROOT / "cgroup.controllers"
    if v2.is_file() and "memory" in v2.read_text().split():
        own = CGROUP_ROOT / _own_path("")
        out += [("v2", p) for p in dict.fromkeys([own, CGROUP_ROOT]) if p.is_dir()]
    v1 = CGROUP_ROOT / "memory"
    if (v1 / "memory.limit_in_bytes").is_file():
        own = v1 / _own_path("memory")
        out += [("v1", p) for p in dict.fromkeys([own, v1]) if p.is_dir()]
    return out


class MemoryCgroup:
    """One cgroup capping the total memory of a run at ``limit`` bytes (swap included where the kernel lets us)."""

    def __init__(self, version: str, parent: Path, limit: int) -> None:
        self.version, self.limit = version, int(limit)
        self.path = parent / f"pivotgym-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            if version == "v2":
                (self.path / "memory.max").write_text(str(self.limit))
                swap = self.path / "memory.swap.max"
                if swap.exists():
                    swap.write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
                memsw = self.path / "memory.memsw.limit_in_bytes"
                if memsw.exists():
                    try:
                        memsw.write_text(str(self.limit))
                    except OSError:
                        pass
        except OSError:
            self.remove()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed by a shell that moves itself into the group and then execs the command."""
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path), *argv]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this group for exceeding the limit."""
        try:
            if self.version == "v2":
                for line in (self.path / "memory.events").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key in ("oom_kill", "oom_group_kill") and int(value) > 0:
                        return True
                return False
            for line in (self.path / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
            return int((self.path / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def remove(self) -> None:
        """Kill what is left in the group and delete it (retrying while the kernel reaps the processes)."""
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def create(limit: int) -> MemoryCgroup | None:
    """A fresh memory cgroup capped at ``limit`` bytes, or None when this host does not let us make one."""
    if _STATE.get("failed"):
        return None
    where = _STATE.get("where")
    places: list[tuple[str, Path]] = [where] if isinstance(where, tuple) else _candidates()
    for version, parent in places:
        try:
            group = MemoryCgroup(version, parent, limit)
        except OSError as exc:
            _STATE["reason"] = f"cannot create a memory cgroup under {parent}: {exc}"
            continue
        if "where" not in _STATE and not _can_join(group):
            group.remove()
            _STATE["reason"] = f"a process cannot join a memory cgroup under {parent}"
            continue
        _STATE["where"] = (version, parent)
        return group
    _STATE["failed"] = True
    _STATE.setdefault("reason", "no cgroup memory controller is mounted at /sys/fs/cgroup")
    return None


def _can_join(group: MemoryCgroup) -> bool:
    """Whether a process can move itself into ``group`` (checked once: the wrapper depends on it)."""
    import subprocess

    try:
        return subprocess.run(group.wrap(["true"]), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def where() -> Path | None:
    """The directory this host's run cgroups are created in (None until one was)."""
    found = _STATE.get("where")
    return found[1] if found else None  # type: ignore[index]


def memory_cgroups_available() -> bool:
    """Whether an aggregate memory limit can be enforced on this host (probes once, then caches)."""
    group = create(1 << 30)
    if group is None:
        return False
    group.remove()
    return True


def unavailable_reason() -> str:
    """Why :func:`memory_cgroups_available` is False ('' when it is True)."""
    return "" if memory_cgroups_available() else str(_STATE.get("reason", ""))
