"""The sandbox contract: run one command on a work dir under limits, get a :class:`RunResult` back.

Every backend shares the same process handling: the command runs in its own session (process group) with POSIX
rlimits applied before ``exec`` (CPU seconds, address space, processes, file size, no core dumps; through
``prlimit`` when util-linux has it, so the parent can spawn with vfork, else in a ``preexec_fn``), stdout/stderr are
drained by threads and truncated to ``limits.output_bytes`` each, and a wall-clock deadline kills the whole group.

Aggregate limits bound what all processes of a run use together, whoever else runs beside it:

* ``total_memory_bytes``, ``max_processes`` and ``cpu_quota`` through a cgroup per run (see
  :mod:`pivotgym.sandbox.cgroup`; where the host has no writable cgroup, only the per-process rlimits apply,
  and on a root host each bwrap run still gets a uid of its own, so RLIMIT_NPROC counts only its processes);
  ``cpu_quota`` (default 1 CPU) caps CPU time per wall second, so a fork bomb cannot load the host;
* ``disk_bytes``: the work dir is polled during the run (see :mod:`pivotgym.sandbox.disk`); sparse files count
  at their apparent size, and directories nested deeper than ``walk.MAX_DEPTH`` stop the run and are pruned.

When one is hit, :attr:`RunResult.limit_hit` names it (``memory``, ``processes``, ``disk``, ``command``) and
:attr:`RunResult.limit_message` says so in words an agent can act on: a caller can tell a run the
infrastructure stopped from a command that failed on its own.

A shell command longer than ``ARGV_COMMAND_BYTES`` does not fit in one argument (Linux allows 128 KiB): backends
pass it through a file that ``/bin/sh -c '. FILE'`` reads, with the same semantics as ``sh -c``. Commands
longer than ``MAX_COMMAND_BYTES`` are not run: the result says so (``limit_hit == "command"``).
Backends differ in what they wrap around the command (bubblewrap namespaces, a Docker container, or nothing)."""

from __future__ import annotations

import os
import resource
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from pivotgym.errors import SandboxError
from pivotgym.errors import SandboxUnavailable as SandboxUnavailable  # re-exported: its old home

Command = str | Sequence[str]


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. ``None`` disables a limit."""

    wall_seconds: float | None = 60.0  # wall-clock deadline; the whole process tree is killed after it
    cpu_seconds: int | None = 60  # RLIMIT_CPU, per process
    memory_bytes: int | None = 2 << 30  # RLIMIT_AS (address space), per process
    max_processes: int | None = 128  # tasks (threads too) of one run: a pids cgroup, and RLIMIT_NPROC per uid
    file_size_bytes: int | None = 64 << 20  # RLIMIT_FSIZE: the largest file a process may write
    output_bytes: int = 64 << 10  # stdout and stderr are each truncated to this many bytes
    total_memory_bytes: int | None = None  # all processes of a run together (a memory cgroup, where allowed)
    disk_bytes: int | None = None  # the most the work dir may hold during a run (polled; the run is killed)
    cpu_quota: float | None = 1.0  # CPUs all processes of a run may use together (a cpu cgroup, where allowed)

    def with_(self, **changes: Any) -> Limits:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox at ``target`` (absolute; under the work dir's mount point
    it shadows that part of the work dir). Read-only unless ``writable``. The ``local`` backend cannot mount
    and ignores mounts (it isolates nothing anyway)."""

    source: str
    target: str
    writable: bool = False


@dataclass
class RunResult:
    """What a sandboxed command did. ``returncode`` is negative for a signal (e.g. -9 after a kill)."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0
    backend: str = ""
    command: str = ""
    limit_hit: str = ""  # "memory", "processes", "disk" or "command" when a limit of the run stopped it
    limit_message: str = ""  # the same in words, for the agent's observation
    cpu_time: float | None = None  # CPU seconds its processes used until it ended or was killed (cgroup-accounted)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout then stderr, as a terminal would interleave them roughly."""
        return self.stdout + (
            ("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr if self.stderr else ""
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def command_text(cmd: Command) -> str:
    return cmd if isinstance(cmd, str) else shlex.join(list(cmd))


def command_argv(cmd: Command) -> list[str]:
    """A shell string runs under ``/bin/sh -c``; a sequence runs as given."""
    return ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)


ARGV_COMMAND_BYTES = 64 << 10  # a shell command longer than this is passed through a file, not an argument
MAX_COMMAND_BYTES = 4 << 20  # a command longer than this is not run at all (see oversized)
MAX_ARGV_BYTES = 1 << 20  # the most a command given as an argument list may hold in all


def script_of(cmd: Command) -> bytes | None:
    """The text of a shell command too long to pass as one argument (None when ``cmd`` fits in argv)."""
    if not isinstance(cmd, str):
        return None
    data = cmd.encode("utf-8", errors="surrogateescape")
    return data if len(data) > ARGV_COMMAND_BYTES else None


def script_argv(path: str) -> list[str]:
    """Run the shell script at ``path`` (a file the command cannot change) as ``/bin/sh -c`` would run it:
    ``.`` reads it into the same shell, so ``$0``, ``exit`` and the exit status behave as with ``-c``."""
    return ["/bin/sh", "-c", f". {shlex.quote(path)}"]


def oversized(cmd: Command, backend: str, max_bytes: int = MAX_COMMAND_BYTES) -> RunResult | None:
    """The result of refusing a command too long to run (None when it is short enough): ``limit_hit ==
    "command"`` and a message saying what to do instead."""
    if isinstance(cmd, str):
        size = len(cmd.encode("utf-8", errors="surrogateescape"))
        what = "shell command"
    else:
        parts = [os.fsencode(a) for a in cmd]
        size, max_bytes = sum(len(a) + 1 for a in parts), min(max_bytes, MAX_ARGV_BYTES)
        if any(len(a) >= 128 << 10 for a in parts):
            size = max(size, max_bytes + 1)  # one argument past the kernel's MAX_ARG_STRLEN
        what = "argument list (each argument at most 128 KiB)"
    if size <= max_bytes:
        return None
    message = (
        f"command too long: the {what} holds {size} bytes, and one command may hold {_kib(max_bytes)}; "
        "write long scripts or data to a file in the work dir and run that file"
    )
    return RunResult(
        returncode=126,
        stdout="",
        stderr=message + "\n",
        backend=backend,
        command=command_text(cmd)[:1000],
        limit_hit="command",
        limit_message=message,
    )


def _kib(n: int) -> str:
    return f"{n >> 10} KiB" if n < 1 << 20 else f"{n / (1 << 20):.0f} MiB"


_RLIMIT_FLAGS = (
    ("core", "RLIMIT_CORE"),
    ("cpu", "cpu_seconds"),
    ("as", "memory_bytes"),
    ("nproc", "max_processes"),
    ("fsize", "file_size_bytes"),
)


def prlimit_prefix(limits: Limits) -> list[str] | None:
    """``prlimit --cpu=N:N ... --`` (util-linux) setting the same rlimits as :func:`_rlimit_setter`, or None
    when ``prlimit`` is missing. Applying the limits through an exec instead of a ``preexec_fn`` lets
    ``subprocess`` spawn with vfork: a parent holding a large heap (a loaded model) no longer pays a full
    fork per command (measured: 166 ms -> 1.4 ms with a 1 GiB parent)."""
    exe = _prlimit_path()
    if exe is None:
        return None
    argv = [exe]
    for flag, attr in _RLIMIT_FLAGS:
        value = 0 if attr == "RLIMIT_CORE" else getattr(limits, attr)
        if value is not None:
            argv.append(f"--{flag}={int(value)}:{int(value)}")
    return [*argv, "--"]


def _prlimit_path() -> str | None:
    global _PRLIMIT
    if _PRLIMIT is None:
        import shutil

        _PRLIMIT = shutil.which("prlimit") or ""
    return _PRLIMIT or None


_PRLIMIT: str | None = None


def _rlimit_setter(limits: Limits):
    def apply() -> None:
        def setl(kind: int, value: int | float | None) -> None:
            if value is not None:
                v = int(value)
                resource.setrlimit(kind, (v, v))

        os.umask(0o022)  # bwrap creates mount points with it: the sandbox user must traverse them
        setl(resource.RLIMIT_CORE, 0)
        setl(resource.RLIMIT_CPU, limits.cpu_seconds)
        setl(resource.RLIMIT_AS, limits.memory_bytes)
        setl(resource.RLIMIT_NPROC, limits.max_processes)
        setl(resource.RLIMIT_FSIZE, limits.file_size_bytes)

    return apply


class _Capture:
    """Drain a pipe in a thread, keeping at most ``cap`` bytes (the rest is read and dropped)."""

    def __init__(self, stream: IO[bytes], cap: int) -> None:
        self.stream, self.cap = stream, cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            while True:
                chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
                if not chunk:
                    break
                room = self.cap - self.size
                if room > 0:
                    self.chunks.append(chunk[:room])
                    self.size += min(room, len(chunk))
                self.dropped += max(0, len(chunk) - max(room, 0))
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        data = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            data += f"\n[... output truncated: {self.dropped} more bytes ...]\n"
        return data


def run_process(
    argv: list[str],
    *,
    cwd: str | os.PathLike[str] | None,
    limits: Limits,
    env: Mapping[str, str] | None,
    stdin: str | None = None,
    backend: str,
    command: str,
    rlimits: bool = True,
    watch: Path | None = None,
    pass_fds: Sequence[int] = (),
    shared_uid: bool = False,
    on_stop: Callable[[], None] | None = None,
) -> RunResult:
    """Run ``argv`` in a new session under ``limits``; kill its process group at the deadline, when the
    memory cgroup OOM-kills, or when ``watch`` (the work dir) grows past ``limits.disk_bytes`` (or nests
    directories deeper than ``walk.MAX_DEPTH``: the deep part is deleted afterwards). ``pass_fds`` stay
    open in the child (bwrap reads its arguments and data files from them). ``shared_uid`` says other runs
    may run as the same user: then a pids cgroup, where there is one, replaces RLIMIT_NPROC (which would
    count their processes against this run). ``on_stop`` is called when the host stops the run (deadline,
    disk): for processes outside the group, as a container the ``docker`` client only talks to."""
    from pivotgym.sandbox import cgroup
    from pivotgym.sandbox.disk import DiskWatch
    from pivotgym.sandbox.walk import MAX_DEPTH, prune

    start = time.perf_counter()
    group = cgroup.run_group(memory=limits.total_memory_bytes, pids=limits.max_processes, cpu=limits.cpu_quota)
    preexec = None
    if rlimits:
        per_run = limits
        if shared_uid and group is not None and "pids" in group.dirs:
            # RLIMIT_NPROC counts every process of the uid, other runs' too: the pids cgroup counts this run's
            per_run = limits.with_(max_processes=None)
        prefix = prlimit_prefix(per_run)
        if prefix is None:
            preexec = _rlimit_setter(per_run)
        else:
            argv = prefix + list(argv)
    if group is not None:
        argv = group.wrap(list(argv))
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
            umask=0o022,  # bwrap creates mount points with it: the sandbox user must traverse them
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        if group is not None:
            group.remove()
        raise SandboxError(f"could not start {argv[0]!r}: {exc}") from exc
    out, err = _Capture(proc.stdout, limits.output_bytes), _Capture(proc.stderr, limits.output_bytes)  # type: ignore[arg-type]
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True).start()
    # A timer kills the group at the deadline while this thread blocks in wait(): Popen.wait(timeout) polls
    # with sleeps growing to 50 ms, which added ~25 ms to every short command.
    deadline_hit = threading.Event()

    used_when_stopped: list[float | None] = []

    def stop() -> None:
        """Kill the run now; its processes get CPU again to exit (what they used so far is kept)."""
        kill_group(proc)
        if on_stop is not None:
            on_stop()
        if group is not None:
            used_when_stopped.append(group.cpu_time())
            group.unthrottle()

    def on_deadline() -> None:
        if proc.poll() is None:
            deadline_hit.set()
            stop()

    timer = threading.Timer(limits.wall_seconds, on_deadline) if limits.wall_seconds is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    disk = DiskWatch(watch, limits.disk_bytes, stop) if watch and limits.disk_bytes else None
    try:
        proc.wait()
    except BaseException:  # interrupted (KeyboardInterrupt, a signal handler): nothing of the run outlives it
        kill_group(proc)
        if group is not None:
            group.remove()
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if disk is not None:
            disk.stop()
    timed_out = deadline_hit.is_set()
    # the main process is gone; stop lingering children that still hold the pipes
    kill_group(proc)
    limit_hit = limit_message = ""
    cpu_time = None
    if group is not None:
        if group.pids_limited():
            limit_hit = "processes"
            limit_message = (
                f"process limit hit: the processes of one command may number {limits.max_processes} at once "
                "(threads and the sandbox's own two included), and starting one more failed; start fewer "
                "processes or threads"
            )
        if group.oom_killed():
            limit_hit = "memory"
            limit_message = (
                f"memory limit hit: the processes of one command may use {_mib(group.limit)} "
                "together, and the kernel killed one; use less memory (fewer or smaller processes)"
            )
        cpu_time = used_when_stopped[0] if used_when_stopped else group.cpu_time()
        group.remove()  # kills what is left of the run (escaped its process group) before the pipes are drained
    for cap in (out, err):
        cap.thread.join(timeout=2.0)
    if disk is not None and disk.exceeded:
        limit_hit = "disk"
        if disk.too_deep:
            prune(disk.root, MAX_DEPTH)
            limit_message = (
                f"disk limit hit: the work dir may nest directories at most {MAX_DEPTH} levels deep, and the "
                f"command was killed when it went deeper; the directories below level {MAX_DEPTH} were deleted"
            )
        else:
            limit_message = (
                f"disk limit hit: the work dir may hold {_mib(disk.limit)} in all (sparse files at their full "
                "size), and the command was killed when it grew past that; delete large files and write less"
            )
    return RunResult(
        returncode=proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=bool(out.dropped or err.dropped),
        duration=time.perf_counter() - start,
        backend=backend,
        command=command,
        limit_hit=limit_hit,
        limit_message=limit_message,
        cpu_time=cpu_time,
    )


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write ``data`` to the command's stdin and close it (in a thread: a command that does not read its
    input must not block the caller before the deadline timer starts)."""
    try:
        pipe.write(data)
    except (OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Sandbox:
    """Base class of the backends. ``run`` executes ``cmd`` with ``workdir`` as the only writable place.

    ``env`` replaces the environment (a minimal one by default: PATH, HOME, LANG, TMPDIR); ``limits``
    defaults to the sandbox's own ``limits``.
    """

    limits: Limits = field(default_factory=Limits)
    name = "base"
    max_command_bytes = MAX_COMMAND_BYTES  # longer commands are refused (a backend without a script file: less)

    def run(
        self,
        cmd: Command,
        workdir: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        mounts: Sequence[Mount] = (),
        hide: Sequence[str | os.PathLike[str]] = (),
    ) -> RunResult:
        """Run ``cmd`` with ``workdir`` writable; ``mounts`` add host paths (read-only unless marked).

        ``hide`` lists host paths the command must not read (an installed copy of the code under repair, a
        benchmark's reference solutions): where the backend shows one, it appears as an empty read-only
        directory or a file that cannot be opened (see :mod:`pivotgym.sandbox.hide`). ``local`` shows the whole host and
        cannot hide anything; a ``docker`` container sees its image, not the host, and ignores it."""
        limits = limits or self.limits
        if timeout is not None:
            limits = limits.with_(wall_seconds=timeout)
        path = Path(workdir).resolve()
        if not path.is_dir():
            raise SandboxError(f"work dir {path} does not exist; create it (or fork one) before running")
        refused = oversized(cmd, self.name, self.max_command_bytes)
        if refused is not None:
            return refused
        extra: dict[str, Any] = {}
        if mounts:
            extra["mounts"] = tuple(mounts)
        if hide:  # passed only when given, so backends written before it keep working without it
            extra["hide"] = tuple(os.fspath(p) for p in hide)
        return self._run(cmd, path, limits, env, stdin, **extra)

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
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "limits": self.limits.to_dict()}


def base_env(workdir: Path, extra: Mapping[str, str] | None = None, *, tmpdir: str = "/tmp") -> dict[str, str]:
    """The minimal environment a sandboxed command sees (no host secrets, no proxies)."""
    import sys

    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": tmpdir,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    env.update(extra or {})
    return env
