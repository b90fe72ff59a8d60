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
* when the host runs as root, the command runs as an unprivileged user (``nobody``) with no capabilities and
  ``no_new_privs``, so the process limit (RLIMIT_NPROC) holds and set-uid binaries cannot regain root."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
)
from pivotgym.sandbox.hide import hidden_targets

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


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand a work dir to the sandbox user (only files not already theirs are touched)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            try:
                st = os.lstat(name)
                if st.st_uid != uid or st.st_gid != gid:
                    os.lchown(name, uid, gid)
            except FileNotFoundError:
                pass


@dataclass
class BwrapSandbox(Sandbox):
    """Run commands under bubblewrap. ``ro_binds`` adds host paths visible read-only (same path inside).
    ``python_roots`` replaces the Python trees shown (default :func:`python_paths`: this interpreter and its
    environment) by an allow-listed runtime's, so the command sees no package of the host's environment."""

    limits: Limits = field(default_factory=Limits)
    ro_binds: Sequence[str] = ()
    python_roots: Sequence[str] | None = None
    executable: str | None = None
    uid: int = UNPRIVILEGED_UID
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
        self, cmd: Command, workdir: Path, limits: Limits, mounts: Sequence[Mount] = (), hide: Sequence[str] = ()
    ) -> list[str]:
        """The full bwrap command line for ``cmd`` (exposed for tests and debugging)."""
        args: list[str] = [
            str(self.executable),
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
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
        binds = [str(Path("/etc") / n) for n in ETC_FILES if (Path("/etc") / n).exists()]
        binds += [*(python_paths() if self.python_roots is None else self.python_roots), *self.ro_binds]
        # bwrap would create missing parents of mount points with mode 0700, which the unprivileged
        # sandbox user could not traverse: create them explicitly, world-traversable
        parents = sorted(
            {
                str(p)
                for b in binds
                for p in Path(b).parents
                if str(p) not in ("/", "/usr", "/tmp") and not str(p).startswith("/usr/")
            },
            key=lambda p: (p.count("/"), p),
        )
        for parent in parents:
            args += ["--perms", "0755", "--dir", parent]
        for path in binds:
            args += ["--ro-bind", path, path]
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
            args += [
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--",
                str(self._setpriv),
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--clear-groups",
                "--no-new-privs",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        else:
            args += ["--"]
        return args + command_argv(cmd)

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
        if self._drop:
            chown_tree(workdir, self.uid, self.uid)
            mode = workdir.stat().st_mode & 0o7777
            if mode & 0o755 != 0o755:
                os.chmod(workdir, mode | 0o755)  # bwrap enters it with no capabilities before dropping to the user
        environment = base_env(Path(MOUNT_POINT), env)
        for mount in mounts:
            if mount.writable and self._drop:
                chown_tree(Path(mount.source), self.uid, self.uid)
        return run_process(
            self.argv(cmd, workdir, limits, mounts, hide),
            cwd=workdir,
            limits=limits,
            env=environment,
            stdin=stdin,
            backend=self.name,
            command=command_text(cmd),
            watch=workdir,
        )


def bwrap_available() -> bool:
    try:
        BwrapSandbox()
    except SandboxUnavailable:
        return False
    return True
