"""Aggregate limits for everything one sandboxed command starts: a control group per run.

Per-process rlimits do not bound a run: three processes of 1.5 GB each fit under a 2 GB RLIMIT_AS, and
RLIMIT_NPROC is counted per *user*, so one run's processes eat into another's. A cgroup per run bounds the
sum, in three controllers:

* ``memory`` (``Limits.total_memory_bytes``): the kernel OOM-kills inside the group, which
  :meth:`RunCgroup.oom_killed` then reports;
* ``pids`` (``Limits.max_processes``): every task of the run counts (threads too, and the sandbox's own
  helper processes), whoever owns it, and no other run's; :meth:`RunCgroup.pids_limited` says whether a
  fork failed at the limit;
* ``cpu`` (``Limits.cpu_quota``, in CPUs): the run gets at most that much CPU time per wall second, however
  many processes it starts (a fork bomb no longer loads the host); :meth:`RunCgroup.cpu_time` reports what it
  used (``cpuacct`` on v1).

Both cgroup v2 (one directory, ``memory.max`` / ``pids.max`` / ``cpu.max``) and v1 hierarchies (one directory
per controller) are used, each controller wherever this host lets us write. Where none is writable (an
unprivileged user without a delegated cgroup, most containers), :func:`available` is False for it and only
the per-process rlimits apply; :func:`unavailable_reason` says why.

The command joins the groups before it starts: it is wrapped in ``sh -c 'echo $$ > .../cgroup.procs; exec
...'``, so every descendant is born inside them.
"""

from __future__ import annotations

import itertools
import os
import shlex
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
_counter = itertools.count()
_WHERE: dict[str, tuple[str, Path]] = {}  # controller -> (version, parent) where run groups are made
_FAILED: dict[str, str] = {}  # controller -> why this host gives runs none
_REASON: dict[str, str] = {}  # controller -> the last failure seen while probing


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


def _v1_marker(controller: str) -> str:
    """A file the root of ``controller``'s v1 hierarchy has (the pids root has no pids.* files)."""
    return {
        "memory": "memory.limit_in_bytes",
        "pids": "cgroup.procs",
        "cpu": "cpu.cfs_quota_us",
        "cpuacct": "cpuacct.usage",
    }[controller]


def _candidates(controller: str) -> list[tuple[str, Path]]:
    """(version, parent directory) pairs where a child cgroup with ``controller`` could be made, best first."""
    out: list[tuple[str, Path]] = []
    v2 = CGROUP_ROOT / "cgroup.controllers"
    v2_name = "cpu" if controller == "cpuacct" else controller  # v2 accounts CPU time in cpu.stat always
    if v2.is_file() and (v2_name in v2.read_text().split() or controller == "cpuacct"):
        own = CGROUP_ROOT / _own_path("")
        out += [("v2", p) for p in dict.fromkeys([own, CGROUP_ROOT]) if p.is_dir()]
    v1 = CGROUP_ROOT / controller
    if v1.is_dir() and (v1 / _v1_marker(controller)).is_file():
        own = v1 / _own_path(controller)
        out += [("v1", p) for p in dict.fromkeys([own, v1]) if p.is_dir()]
    return out


class RunCgroup:
    """The control groups of one run: a directory per v1 hierarchy (or one v2 directory) with its limits."""

    def __init__(self) -> None:
        self.dirs: dict[str, tuple[str, Path]] = {}  # controller -> (version, directory)
        self.limit = 0  # the memory limit in bytes (0 = none)
        self.name = f"pivotgym-{os.getpid()}-{next(_counter)}"

    # ---------------------------------------------------------------- building
    def add(self, controller: str, version: str, parent: Path, value: float | None) -> None:
        """Make (or reuse) this run's directory under ``parent`` and set ``controller``'s limit there."""
        path = parent / self.name
        fresh = not path.is_dir()
        if fresh:
            path.mkdir()
        try:
            if version == "v2" and controller != "cpuacct":
                _enable_v2(parent, controller)
            _set_limit(controller, version, path, value)
        except OSError:
            if fresh:
                _rmdir_quietly(path)
            raise
        self.dirs[controller] = (version, path)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed by a shell that moves itself into the groups and then execs the command."""
        moves = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.paths())
        return ["/bin/sh", "-c", f'{moves} && exec "$@"', "pivotgym-cgroup", *argv]

    def paths(self) -> list[Path]:
        """The distinct directories of this run (one on v2, one per hierarchy on v1)."""
        return list(dict.fromkeys(p for _v, p in self.dirs.values()))

    # ---------------------------------------------------------------- reading
    def _read(self, controller: str, v1_file: str, v2_file: str) -> str:
        version, path = self.dirs[controller]
        try:
            return (path / (v2_file if version == "v2" else v1_file)).read_text()
        except OSError:
            return ""

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this run for exceeding the memory limit."""
        if "memory" not in self.dirs:
            return False
        if self.dirs["memory"][0] == "v2":
            events = _keyed(self._read("memory", "", "memory.events"))
            return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
        control = _keyed(self._read("memory", "memory.oom_control", ""))
        if "oom_kill" in control:
            return control["oom_kill"] > 0
        return _int(self._read("memory", "memory.failcnt", "")) > 0

    def pids_limited(self) -> bool:
        """Whether a fork (or clone) of this run failed because the process limit was reached."""
        if "pids" not in self.dirs:
            return False
        return _keyed(self._read("pids", "pids.events", "pids.events")).get("max", 0) > 0

    def cpu_time(self) -> float | None:
        """CPU seconds all processes of the run used (user + system), or None where it is not accounted."""
        for controller in ("cpuacct", "cpu"):
            if controller not in self.dirs:
                continue
            if self.dirs[controller][0] == "v2":
                usec = _keyed(self._read(controller, "", "cpu.stat")).get("usage_usec")
                if usec is not None:
                    return usec / 1e6
            elif controller == "cpuacct":
                text = self._read("cpuacct", "cpuacct.usage", "")
                if text.strip():
                    return _int(text) / 1e9
        return None

    # ---------------------------------------------------------------- teardown
    def unthrottle(self) -> None:
        """Lift the CPU cap of a run that is being killed: a killed process needs CPU time to exit, and a
        throttled group of a hundred dying processes took seconds to empty under a quarter-CPU cap."""
        if "cpu" in self.dirs:
            version, path = self.dirs["cpu"]
            if version == "v2":
                _try_write(path / "cpu.max", f"max {CPU_PERIOD_US}")
            else:
                _try_write(path / "cpu.cfs_quota_us", "-1")

    def remove(self) -> None:
        """Kill what is left in the groups and delete them (retrying while the kernel reaps the processes).

        The CPU cap is lifted first (see :meth:`unthrottle`)."""
        self.unthrottle()
        left = self.paths()
        delay, deadline = 0.001, time.monotonic() + 3.0
        while True:
            for path in left:
                try:
                    pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    pids = []
                for pid in pids:
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
            left = [p for p in left if not _rmdir_quietly(p)]
            if not left or time.monotonic() > deadline:
                return
            time.sleep(delay)  # the kernel is still reaping: usually a millisecond or two
            delay = min(delay * 2, 0.05)


def _keyed(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            pass
    return out


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return 0


def _rmdir_quietly(path: Path) -> bool:
    """Remove a cgroup directory; True when it is gone."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _enable_v2(parent: Path, controller: str) -> None:
    """Make sure ``controller`` is delegated to ``parent``'s children (a no-op when it already is)."""
    control = parent / "cgroup.subtree_control"
    try:
        if controller in control.read_text().split():
            return
        control.write_text(f"+{controller}")
    except OSError:
        pass  # the limit file will then be missing, and _set_limit fails with a clear OSError


def _set_limit(controller: str, version: str, path: Path, value: float | None) -> None:
    if controller == "memory":
        limit = int(value or 0)
        if version == "v2":
            (path / "memory.max").write_text(str(limit))
            _try_write(path / "memory.swap.max", "0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit))
            _try_write(path / "memory.memsw.limit_in_bytes", str(limit))
    elif controller == "pids":
        (path / "pids.max").write_text(str(int(value or 0)))
    elif controller == "cpu":
        quota = max(1000, int(float(value or 0) * CPU_PERIOD_US))
        if version == "v2":
            (path / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            (path / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
    elif controller == "cpuacct" and version == "v1" and not (path / "cpuacct.usage").is_file():
        raise OSError(f"{path} has no cpuacct.usage")


def _try_write(path: Path, text: str) -> None:
    if path.exists():
        try:
            path.write_text(text)
        except OSError:
            pass


def run_group(*, memory: int | None = None, pids: int | None = None, cpu: float | None = None) -> RunCgroup | None:
    """The cgroups of one run with the given limits (None = not limited), or None when this host lets us
    make none of them. A controller the host does not offer is left out (see :func:`unavailable_reason`)."""
    wanted: dict[str, float | None] = {}
    if memory:
        wanted["memory"] = memory
    if pids:
        wanted["pids"] = pids
    if cpu:
        wanted["cpu"] = cpu
        wanted["cpuacct"] = None
    if not wanted:
        return None
    group = RunCgroup()
    group.limit = int(memory or 0)
    for controller, value in wanted.items():
        _join_controller(group, controller, value)
    if not group.dirs:
        return None
    return group


def _join_controller(group: RunCgroup, controller: str, value: float | None) -> None:
    """Add ``controller`` to ``group`` where it worked before, else at the first candidate place that works
    (a process must be able to join it: probed once per controller). Remembers failure, with its reason."""
    if controller in _FAILED:
        return
    known = _WHERE.get(controller)
    for version, parent in [known] if known else _candidates(controller):
        try:
            group.add(controller, version, parent, value)
        except OSError as exc:
            _REASON.setdefault(controller, f"cannot create a {controller} cgroup under {parent}: {exc}")
            continue
        if known is None and not _can_join(group.dirs[controller][1]):
            _forget(group, controller)
            _REASON[controller] = f"a process cannot join a {controller} cgroup under {parent}"
            continue
        _WHERE[controller] = (version, parent)
        _sweep(parent)
        return
    _FAILED[controller] = _REASON.get(controller) or f"no cgroup {controller} controller is mounted at {CGROUP_ROOT}"


def _sweep(parent: Path) -> None:
    """Delete the empty run groups that processes which died mid-run (killed, no cleanup) left under
    ``parent`` (once per process and place: a run's group is named after the pid that made it)."""
    for path in parent.glob("pivotgym-*-*"):
        try:
            pid = int(path.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            _rmdir_quietly(path)  # fails, harmlessly, while a process is still inside
        except (ValueError, OSError):
            continue


def _forget(group: RunCgroup, controller: str) -> None:
    _version, path = group.dirs.pop(controller)
    if path not in group.paths():
        _rmdir_quietly(path)


def _can_join(path: Path) -> bool:
    """Whether a process can move itself into the cgroup at ``path`` (checked once per controller)."""
    import subprocess

    script = f"echo $$ > {shlex.quote(str(path / 'cgroup.procs'))}"
    try:
        return subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def available(controller: str) -> bool:
    """Whether runs can get a ``controller`` cgroup here (memory, pids, cpu; probes once, then caches)."""
    if controller in _WHERE:
        return True
    value = {"memory": 1 << 30, "pids": 1 << 16, "cpu": 1.0, "cpuacct": None}[controller]
    group = RunCgroup()
    _join_controller(group, controller, value)
    ok = controller in group.dirs
    group.remove()
    return ok


def unavailable_reason(controller: str = "memory") -> str:
    """Why :func:`available` is False for ``controller`` ('' when it is True)."""
    if available(controller):
        return ""
    return _FAILED.get(controller, "")


# ------------------------------------------------------------------ the memory-only API of earlier releases
MemoryCgroup = RunCgroup


def create(limit: int) -> RunCgroup | None:
    """A fresh run cgroup with only a memory limit of ``limit`` bytes, or None when this host has none."""
    return run_group(memory=limit)


def where(controller: str = "memory") -> Path | None:
    """The directory this host's run cgroups of ``controller`` are created in (None until one was)."""
    known = _WHERE.get(controller)
    return known[1] if known else None


def memory_cgroups_available() -> bool:
    """Whether an aggregate memory limit can be enforced on this host (probes once, then caches)."""
    return available("memory")
