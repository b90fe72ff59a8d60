"""Fast copies of a work dir, so a state at turn t can be forked many times.

``fork_dir(src, dst)`` (``method="auto"``) makes a plain in-process copy, which for a source tree of a few hundred
files takes milliseconds; ``method="reflink"`` shells out to ``cp --reflink`` (block-level copy-on-write on
btrfs/xfs), worth it only for large trees since it costs a process start. ``method="hardlink"`` shares inodes and is
only safe for consumers that replace files instead of writing into them (a read-only test run, or an editor that
writes a new file and renames it over the old one).

The tree was written by untrusted code, so a fork bounds what it does (see :mod:`pivotgym.sandbox.walk`):

* only directories, regular files and symlinks (as links, never followed) are copied: FIFOs, sockets and
  device nodes are skipped, so they can neither block nor break a copy; set-uid/set-gid bits are dropped;
* sparse files stay sparse: only their data extents are copied (``SEEK_DATA``/``SEEK_HOLE``), so a 1 TiB file
  that holds 4 KiB costs 4 KiB, not 1 TiB, per fork;
* ``max_bytes`` caps what one fork may write (file data plus ``disk.ENTRY_BYTES`` per entry, the disk
  watch's own charge): past it the fork stops, removes what it wrote and raises :class:`SandboxError`;
* a tree nested deeper than ``max_depth`` (:data:`~pivotgym.sandbox.walk.MAX_DEPTH`) is refused with
  :class:`~pivotgym.sandbox.walk.TreeTooDeep` (a ``SandboxError``), never a ``RecursionError``;
* :func:`remove_dir` deletes a tree of any depth and never raises.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from pivotgym.errors import SandboxError
from pivotgym.sandbox.disk import ENTRY_BYTES
from pivotgym.sandbox.walk import MAX_DEPTH, open_dir, remove_tree, tree_depth_error, walk

_REFLINK_OK: dict[int, bool] = {}
METHODS = ("auto", "reflink", "copy", "hardlink")
_CHUNK = 8 << 20


def _reflink_supported(directory: Path) -> bool:
    dev = directory.stat().st_dev
    if dev not in _REFLINK_OK:
        ok = False
        if shutil.which("cp"):
            with tempfile.TemporaryDirectory(dir=directory) as tmp:
                a, b = Path(tmp, "a"), Path(tmp, "b")
                a.write_bytes(b"x")
                ok = subprocess.run(["cp", "--reflink=always", str(a), str(b)], capture_output=True).returncode == 0
        _REFLINK_OK[dev] = ok
    return _REFLINK_OK[dev]


class _Budget:
    """Bytes a fork may still write; raises once they are spent."""

    def __init__(self, src: Path, limit: int | None) -> None:
        self.src, self.limit, self.used = src, limit, 0

    def charge(self, n: int) -> None:
        self.used += n
        if self.limit is not None and self.used > self.limit:
            raise SandboxError(
                f"cannot fork {self.src}: the copy would write more than {self.limit} bytes (its max_bytes, "
                "the disk cap of a work dir); delete large files from the work dir and try again"
            )


def _copy_data(src_fd: int, dst_fd: int, size: int, budget: _Budget) -> None:
    """Copy the data extents of ``src_fd`` into ``dst_fd`` and give it ``size`` bytes; holes stay holes."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src_fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        end = min(os.lseek(src_fd, start, os.SEEK_HOLE), size)
        if end <= start:
            break
        budget.charge(end - start)
        _copy_range(src_fd, dst_fd, start, end)
        pos = end
    os.ftruncate(dst_fd, size)


def _copy_range(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    offset = start
    while offset < end:
        n = min(_CHUNK, end - offset)
        try:
            copied = os.copy_file_range(src_fd, dst_fd, n, offset, offset)
        except OSError:
            data = os.pread(src_fd, n, offset)
            copied = os.pwrite(dst_fd, data, offset) if data else 0
        if copied <= 0:  # the file shrank under us
            return
        offset += copied


def _copy_file(src_dir: int, dst_dir: int, name: str, st: os.stat_result, budget: _Budget) -> None:
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):  # swapped since it was listed
            return
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            _copy_data(src, dst, st.st_size, budget)
            os.fchmod(dst, st.st_mode & 0o777)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_tree(src: Path, dst: Path, *, link: bool, max_bytes: int | None, max_depth: int) -> None:
    """Copy (or hard-link) ``src`` into the existing empty directory ``dst``, iteratively."""
    budget = _Budget(src, max_bytes)
    src_root = open_dir(src)
    # the open destination directories along the current path, with the mode each gets once filled
    dst_stack: list[tuple[int, int]] = [(open_dir(dst), src.stat().st_mode & 0o1777)]
    try:
        for item in walk(src_root, max_depth):
            if item.too_deep:
                raise tree_depth_error(src, max_depth, "fork")
            while len(dst_stack) > item.depth:
                _finish_dir(dst_stack.pop())
            parent = dst_stack[-1][0]
            budget.charge(ENTRY_BYTES)
            mode = item.st.st_mode
            if stat.S_ISDIR(mode):
                os.mkdir(item.name, 0o700, dir_fd=parent)
                dst_stack.append((open_dir(item.name, parent), mode & 0o1777))
            elif stat.S_ISLNK(mode):
                os.symlink(os.readlink(item.name, dir_fd=item.dir_fd), item.name, dir_fd=parent)
            elif stat.S_ISREG(mode):
                if link:
                    os.link(item.name, item.name, src_dir_fd=item.dir_fd, dst_dir_fd=parent, follow_symlinks=False)
                else:
                    _copy_file(item.dir_fd, parent, item.name, item.st, budget)
            # FIFOs, sockets and device nodes are skipped
    finally:
        while dst_stack:
            _finish_dir(dst_stack.pop())
        os.close(src_root)


def _finish_dir(frame: tuple[int, int]) -> None:
    fd, mode = frame
    try:
        os.fchmod(fd, mode)
    except OSError:
        pass
    os.close(fd)


def _check_depth(src: Path, max_depth: int) -> None:
    for item in walk(src, max_depth):
        if item.too_deep:
            raise tree_depth_error(src, max_depth, "fork")


def fork_dir(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    method: str = "auto",
    *,
    max_bytes: int | None = None,
    max_depth: int = MAX_DEPTH,
) -> Path:
    """Copy the tree ``src`` to the new directory ``dst`` (which must not exist) and return ``dst``.

    ``max_bytes`` caps what the copy writes (pass the work dir's disk cap); ``max_depth`` the nesting it
    accepts. Either refusal raises :class:`SandboxError` and leaves no ``dst`` behind."""
    src, dst = Path(src), Path(dst)
    if method not in METHODS:
        raise ValueError(f"fork method must be one of {METHODS}, got {method!r}")
    if not src.is_dir():
        raise FileNotFoundError(f"cannot fork {src}: not a directory")
    if dst.exists():
        raise FileExistsError(f"cannot fork into {dst}: it already exists")
    if method == "auto":
        method = "copy"
    if method == "reflink":
        if not _reflink_supported(dst.parent if dst.parent.exists() else src.parent):
            raise OSError(f"the filesystem of {dst.parent} does not support reflinks; use method='copy'")
        _check_depth(src, max_depth)  # cp walks iteratively, but the result must stay walkable
        subprocess.run(["cp", "-a", "--reflink=always", str(src), str(dst)], check=True, capture_output=True)
        return dst
    os.mkdir(dst, 0o700)
    try:
        _copy_tree(src, dst, link=method == "hardlink", max_bytes=max_bytes, max_depth=max_depth)
    except BaseException:
        remove_tree(dst)
        raise
    return dst


def remove_dir(path: str | os.PathLike[str]) -> bool:
    """Delete a work dir of any depth, including files a sandboxed command made read-only. Never raises;
    returns whether the path is gone."""
    return remove_tree(path)
