"""A user id of its own for each concurrent sandboxed run, leased from a range under a cross-process lock.

The kernel counts ``RLIMIT_NPROC`` per user: when every sandbox runs as ``nobody``, one run that holds its
process limit makes every other run's ``fork`` fail (a correct fix then scored 0). A run that owns its uid
for its lifetime is charged only for its own processes, cannot signal or ``ptrace`` another run's, and leaves
files no other run's user owns.

Uids come from ``UID_BASE`` .. ``UID_BASE + UID_COUNT - 1`` (200000..204095, above the ranges distributions
hand to users and to subordinate-id maps' usual defaults). A lease holds an exclusive ``flock`` on
``<lock dir>/<uid>.lock`` until it is released (or its process dies: the kernel drops the lock), so runs in
threads of one process and in different processes (parallel profiling workers) never share a uid. The lock
directory must be the same for every process on the host, because uids are host-wide: it is
``$PIVOTGYM_SANDBOX_UID_LOCKS``, else ``/run/lock/pivotgym-sandbox-uids`` (``<tmp>/pivotgym-sandbox-uids-<euid>``
where ``/run/lock`` is missing), created ``0700`` and refused when another user owns it or it is a symlink.
Leasing is for a root host only (an unprivileged host cannot switch uids), and only where the user namespace maps
the whole range (:func:`mapped`); elsewhere the sandbox falls back to one fixed uid and the pids cgroup alone.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path

from pivotgym.errors import SandboxError

UID_BASE = 200_000
UID_COUNT = 4096
ENV_LOCK_DIR = "PIVOTGYM_SANDBOX_UID_LOCKS"


def in_range(uid: int) -> bool:
    """Whether ``uid`` is one the pool hands out."""
    return UID_BASE <= uid < UID_BASE + UID_COUNT


def mapped(start: int = UID_BASE, count: int = UID_COUNT) -> bool:
    """Whether this process's user namespace maps every uid and gid of ``start .. start + count - 1`` (a
    container with a narrow map, rootless podman say, does not: switching to an unmapped uid fails)."""
    for table in ("/proc/self/uid_map", "/proc/self/gid_map"):
        try:
            rows = [tuple(int(x) for x in line.split()) for line in Path(table).read_text().splitlines()]
        except (OSError, ValueError):
            return False
        if not any(inside <= start and start + count <= inside + length for inside, _outside, length in rows):
            return False
    return True


def lock_dir() -> Path:
    """The host-wide directory of the uid locks (see the module doc), created on first use."""
    env = os.environ.get(ENV_LOCK_DIR)
    if env:
        path = Path(env)
    elif Path("/run/lock").is_dir():
        path = Path("/run/lock/pivotgym-sandbox-uids")
    else:
        path = Path(tempfile.gettempdir()) / f"pivotgym-sandbox-uids-{os.geteuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise SandboxError(f"cannot create the sandbox uid lock directory {path}: {exc}; set ${ENV_LOCK_DIR}") from exc
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"the sandbox uid lock directory {path} is not a directory owned by uid {os.geteuid()} and writable "
            f"only by it; remove it or set ${ENV_LOCK_DIR} to a private directory"
        )
    return path


class UidLease:
    """An exclusive claim on ``uid`` until :meth:`release` (also a context manager)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = -1

    def __enter__(self) -> UidLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def lease(prefer: int | None = None) -> UidLease:
    """Claim a free uid of the pool: ``prefer`` when it is free (the uid that already owns a work dir, so its
    files need no chown), else the lowest free one (so sequential runs see the same uid). Raises
    :class:`SandboxError` when all ``UID_COUNT`` are taken."""
    directory = lock_dir()
    order = list(range(UID_BASE, UID_BASE + UID_COUNT))
    if prefer is not None and in_range(prefer):
        order.insert(0, prefer)
    for uid in order:
        held = _try_lock(directory / f"{uid}.lock")
        if held is not None:
            return UidLease(uid, held)
    raise SandboxError(
        f"all {UID_COUNT} sandbox uids ({UID_BASE}..{UID_BASE + UID_COUNT - 1}) are in use by concurrent runs; "
        "run fewer sandboxes at once"
    )


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
