"""The default backend: bubblewrap (Debian package ``bubblewrap``).

What a command sees:

* no network (its own empty network namespace), its own pid/ipc/uts namespaces, a new session;
* a read-only view of only what running code needs: ``/usr`` (and the merged ``/bin``, ``/lib`` links), a few files
  of ``/etc``, the Python installation and the active virtual environment. Nothing else of the host exists inside:
  no home directories, no other work dirs, no ``/work``;
* the work dir mounted read-write at ``/repo`` (a fixed path, so outputs do not depend on where the host keeps it)
  and a size-capped tmpfs at ``/tmp``; extra :class:`~pivotgym.sandbox.base.Mount` s on top (read-only ones under
  ``/repo`` shadow that part of the work dir: the SWE judge mounts the pristine tests there);
* paths passed as ``hide`` (see :mod:`pivotgym.sandbox.hide`) replaced, where they are visible, by an empty
  read-only tmpfs (directories) or ``/dev/null`` on a ``nodev`` mount (files: opening one fails): the SWE plugin
  hides installed copies of the project under test and reference solutions that live in the interpreter's trees;
* when the host runs as root, the command runs as an unprivileged user with no capabilities and ``no_new_privs``,
  so set-uid binaries cannot regain root: a uid of its own per concurrent run (see :mod:`pivotgym.sandbox.uids`;
  ``uid_pool=False``, or a user namespace that does not map the pool, uses the fixed ``uid``, ``nobody``), so
  RLIMIT_NPROC counts only that run's processes.
  ``/etc/passwd`` and ``/etc/group`` are then generated (root, nobody and ``sandbox`` for the run's uid): no
  host account is listed;
* bwrap gets its options through ``--args FD`` (a memfd, NUL-separated), not its command line: the sandbox's
  ``/proc/1/cmdline`` (bwrap's own) shows ``bwrap --args N`` and the command, no host path and no hide list.
  ``/proc`` is the sandbox's own pid namespace: it lists only the run's processes;
* a shell command too long for an argument (see :mod:`pivotgym.sandbox.base`) is placed read-only at
  ``/.pivotgym-command.sh`` and sourced from there."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pivotgym.sandbox import uids
from pivotgym.sandbox.base import (
    Command,
    Limits,
    Mount,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    base_env,
    command_argv,
    command_text,
    run_process,
    script_argv,
    script_of,
)
from pivotgym.sandbox.hide import hidden_targets
from pivotgym.sandbox.walk import MAX_DEPTH, walk

MOUNT_POINT = "/repo"
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "passwd",
    "group",
    "nsswitch.conf",
    "mime.types",
)
UNPRIVILEGED_UID = 65534
SCRIPT_PATH = "/.pivotgym-command.sh"  # where a command too long for an argument is placed (read-only)


def python_paths() -> list[str]:
    """Directories the current Python interpreter and environment live in (bound read-only)."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(Path(os.path.realpath(sys.executable)).parent.parent),
    }
    return sorted(p for p in paths if p and not p.startswith("/usr") and os.path.isdir(p))


def system_dirs() -> list[str]:
    """The system directories bound read-only (``/usr`` and the top-level library dirs that are not links)."""
    dirs = ["/usr"]
    for link in ("bin", "lib", "lib64", "sbin", "lib32"):
        target = Path("/") / link
        if target.is_dir() and not target.is_symlink():
            dirs.append(str(target))
    return dirs


def visible_roots(ro_binds: Sequence[str] = (), python_roots: Sequence[str] | None = None) -> list[str]:
    """The host directories a bwrap command sees, each at its own path (the work dir and mounts aside)."""
    return [*system_dirs(), *(python_paths() if python_roots is None else python_roots), *ro_binds]


def chown_tree(root: Path, uid: int, gid: int, max_depth: int = MAX_DEPTH) -> None:
    """Hand a work dir to the sandbox user (only entries not already theirs are touched; nothing is followed).
    Iterative and depth-bounded: what lies deeper than ``max_depth`` keeps its owner (the run is stopped and
    the deep part pruned if it reaches there, see :mod:`pivotgym.sandbox.disk`)."""
    try:
        st = os.lstat(root)
        if st.st_uid != uid or st.st_gid != gid:
            os.lchown(root, uid, gid)
        for item in walk(root, max_depth):
            if item.st.st_uid != uid or item.st.st_gid != gid:
                try:
                    os.chown(item.name, uid, gid, dir_fd=item.dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
    except FileNotFoundError:
        pass


def _accounts(uid: int) -> tuple[bytes, bytes]:
    """``/etc/passwd`` and ``/etc/group`` for a sandbox that runs as ``uid``: root, nobody and the run's user."""
    passwd = (
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"nobody:x:{UNPRIVILEGED_UID}:{UNPRIVILEGED_UID}:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    group = f"root:x:0:\nnogroup:x:{UNPRIVILEGED_UID}:\n"
    if uid != UNPRIVILEGED_UID:
        passwd += f"sandbox:x:{uid}:{uid}:sandbox:{MOUNT_POINT}:/bin/sh\n"
        group += f"sandbox:x:{uid}:\n"
    return passwd.encode(), group.encode()


class _DataFiles:
    """Contents bwrap copies into the sandbox from descriptors (``--ro-bind-data FD PATH``, ``--args FD``).

    With ``real=False`` (for :meth:`BwrapSandbox.argv`) the descriptors are placeholders like ``<fd:/etc/passwd>``."""

    def __init__(self, real: bool) -> None:
        self.real = real
        self.fds: list[int] = []

    def fd(self, content: bytes, label: str) -> str:
        if not self.real:
            return f"<fd:{label}>"
        fd = _memfd(content, label)
        self.fds.append(fd)
        return str(fd)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def _memfd(content: bytes, label: str) -> int:
    """A descriptor holding ``content``, positioned at its start (a memfd; a deleted temporary file elsewhere)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"pivotgym-{label.strip('/').replace('/', '-')}", os.MFD_CLOEXEC)
    else:  # pragma: no cover - Linux has memfd_create since 3.17
        fd, path = tempfile.mkstemp(prefix="pivotgym-bwrap-")
        os.unlink(path)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class BwrapSandbox(Sandbox):
    """Run commands under bubblewrap. ``ro_binds`` adds host paths visible read-only (same path inside).
    ``python_roots`` replaces the Python trees shown (default :func:`python_paths`: this interpreter and its
    environment) by an allow-listed runtime's, so the command sees no package of the host's environment.
    On a root host each run leases a uid of its own (``uid_pool``); ``uid`` is used when that is off."""

    limits: Limits = field(default_factory=Limits)
    ro_binds: Sequence[str] = ()
    python_roots: Sequence[str] | None = None
    executable: str | None = None
    uid: int = UNPRIVILEGED_UID
    uid_pool: bool = True
    name = "bwrap"

    def __post_init__(self) -> None:
        self.executable = self.executable or shutil.which("bwrap")
        if not self.executable:
            raise SandboxUnavailable(
                "bubblewrap is not installed: `apt-get install bubblewrap` (or `make "
                "system-deps`), or choose another backend (docker; local = no isolation)"
            )
        self._drop = os.geteuid() == 0
        self._setpriv = shutil.which("setpriv") if self._drop else None
        if self._drop and not self._setpriv:
            raise SandboxUnavailable(
                "running as root needs `setpriv` (util-linux) to drop privileges inside "
                "the sandbox: `apt-get install util-linux`"
            )

    def argv(
        self,
        cmd: Command,
        workdir: Path,
        limits: Limits,
        mounts: Sequence[Mount] = (),
        hide: Sequence[str] = (),
        *,
        uid: int | None = None,
    ) -> list[str]:
        """The full bwrap command line for ``cmd`` as if its options were on the command line (exposed for tests
        and debugging; a run passes the options through ``--args``, see :meth:`options`)."""
        files = _DataFiles(real=False)
        options = self.options(workdir, limits, mounts, hide, files, uid=self.uid if uid is None else uid)
        return [str(self.executable), *options, *self._tail(cmd, files, self.uid if uid is None else uid)]

    def options(
        self,
        workdir: Path,
        limits: Limits,
        mounts: Sequence[Mount],
        hide: Sequence[str],
        files: _DataFiles,
        *,
        uid: int,
    ) -> list[str]:
        """bwrap's options (everything before ``--``): namespaces, the filesystem view, the work dir."""
        args: list[str] = [
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/usr",
            "/usr",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        for link in ("bin", "lib", "lib64", "sbin", "lib32"):
            target = Path("/") / link
            if target.is_symlink():
                args += ["--symlink", os.readlink(target), str(target)]
            elif target.is_dir():
                args += ["--ro-bind", str(target), str(target)]
        # the private /tmp comes before the binds, so an environment that lives under /tmp (a CI checkout's
        # .venv, say) is mounted on top of it instead of being hidden by it
        tmp_size = limits.file_size_bytes or (256 << 20)
        args += ["--size", str(tmp_size), "--tmpfs", "/tmp"]
        generated = ("passwd", "group") if self._drop else ()
        binds = [str(Path("/etc") / n) for n in ETC_FILES if n not in generated and (Path("/etc") / n).exists()]
        binds += [*(python_paths() if self.python_roots is None else self.python_roots), *self.ro_binds]
        # bwrap would create missing parents of mount points with mode 0700, which the unprivileged
        # sandbox user could not traverse: create them explicitly, world-traversable
        parents = sorted(
            {
                str(p)
                for b in [*binds, "/etc/passwd"]
                for p in Path(b).parents
                if str(p) not in ("/", "/usr", "/tmp") and not str(p).startswith("/usr/")
            },
            key=lambda p: (p.count("/"), p),
        )
        for parent in parents:
            args += ["--perms", "0755", "--dir", parent]
        for path in binds:
            args += ["--ro-bind", path, path]
        if generated:
            passwd, group = _accounts(uid)
            args += ["--perms", "0644", "--ro-bind-data", files.fd(passwd, "/etc/passwd"), "/etc/passwd"]
            args += ["--perms", "0644", "--ro-bind-data", files.fd(group, "/etc/group"), "/etc/group"]
        # after the binds they blank out, before the work dir and the mounts (which live elsewhere)
        for path, is_dir in hidden_targets(hide, [*visible_roots(self.ro_binds, self.python_roots), *binds]):
            if is_dir:
                args += ["--perms", "0555", "--size", "4096", "--tmpfs", path, "--remount-ro", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
        args += ["--bind", str(workdir), MOUNT_POINT]
        for mount in mounts:  # after the work dir, so those under /repo shadow it
            args += ["--bind" if mount.writable else "--ro-bind", mount.source, mount.target]
        args += ["--chdir", MOUNT_POINT]
        if self._drop:
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return args

    def _tail(self, cmd: Command, files: _DataFiles, uid: int) -> list[str]:
        """``--``, the privilege drop and the command (the part of bwrap's argv that stays on its command line)."""
        tail = ["--"]
        script = script_of(cmd)
        if script is not None:  # too long for an argument: a read-only file the shell sources
            tail = ["--perms", "0444", "--ro-bind-data", files.fd(script, SCRIPT_PATH), SCRIPT_PATH, "--"]
        if self._drop:
            tail += [
                str(self._setpriv),
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--no-new-privs",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        return tail + (script_argv(SCRIPT_PATH) if script is not None else command_argv(cmd))

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
        lease = None
        uid = self.uid
        if self._drop and self.uid_pool and _pool_mapped():
            lease = uids.lease(prefer=workdir.stat().st_uid)
            uid = lease.uid
        files = _DataFiles(real=True)
        try:
            if self._drop:
                chown_tree(workdir, uid, uid)
                mode = workdir.stat().st_mode & 0o7777
                if mode & 0o755 != 0o755:
                    os.chmod(workdir, mode | 0o755)  # bwrap enters it with no capabilities before dropping to the user
                for mount in mounts:
                    if mount.writable:
                        chown_tree(Path(mount.source), uid, uid)
            environment = base_env(Path(MOUNT_POINT), env)
            options = self.options(workdir, limits, mounts, hide, files, uid=uid)
            tail = self._tail(cmd, files, uid)
            args_fd = files.fd(b"".join(os.fsencode(a) + b"\0" for a in options), "bwrap-args")
            return run_process(
                [str(self.executable), "--args", args_fd, *tail],
                cwd=workdir,
                limits=limits,
                env=environment,
                stdin=stdin,
                backend=self.name,
                command=command_text(cmd),
                watch=workdir,
                pass_fds=files.fds,
                shared_uid=lease is None,
            )
        finally:
            files.close()
            if lease is not None:
                lease.release()


_POOL: list[bool] = []


def _pool_mapped() -> bool:
    """Whether the uid pool can be used here (checked once per process)."""
    if not _POOL:
        _POOL.append(uids.mapped())
    return _POOL[0]


def bwrap_available() -> bool:
    try:
        BwrapSandbox()
    except SandboxUnavailable:
        return False
    return True
