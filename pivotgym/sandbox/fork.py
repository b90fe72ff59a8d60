"""Fast copies of a work dir, so a state at turn t can be forked many times.

``fork_dir(src, dst)`` (``method="auto"``) makes a plain in-process copy, which for a source tree of a few hundred
files takes milliseconds; ``method="reflink"`` shells out to ``cp --reflink`` (block-level copy-on-write on
btrfs/xfs), worth it only for large trees since it costs a process start. ``method="hardlink"`` shares inodes and is
only safe for consumers that replace files instead of writing into them (a read-only test run, or an editor that
writes a new file and renames it over the old one).

Only directories, regular files and symlinks (as links, never followed) are copied: FIFOs, sockets and
device nodes that sandboxed code left in a work dir are skipped, so they can neither block nor break a copy.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

_REFLINK_OK: dict[int, bool] = {}
METHODS = ("auto", "reflink", "copy", "hardlink")


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


def _special_files(directory: str, names: list[str]) -> list[str]:
    """``copytree``'s ignore callback: the entries that are neither directory, regular file nor symlink."""
    skip = []
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            skip.append(name)
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            skip.append(name)
    return skip


def _copy_tree(src: Path, dst: Path, link: bool) -> None:
    os.makedirs(dst, exist_ok=False)
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target = dst if rel == "." else dst / rel
        for d in dirnames:
            s = os.path.join(dirpath, d)
            if os.path.islink(s):
                os.symlink(os.readlink(s), target / d)
            else:
                os.mkdir(target / d)
        skip = set(_special_files(dirpath, filenames))
        for f in filenames:
            s = os.path.join(dirpath, f)
            if f in skip:
                continue
            if os.path.islink(s):
                os.symlink(os.readlink(s), target / f)
            elif link:
                os.link(s, target / f)
            else:
                shutil.copyfile(s, target / f)
                shutil.copymode(s, target / f)


def fork_dir(src: str | os.PathLike[str], dst: str | os.PathLike[str], method: str = "auto") -> Path:
    """Copy the tree ``src`` to the new directory ``dst`` (which must not exist) and return ``dst``."""
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
        subprocess.run(["cp", "-a", "--reflink=always", str(src), str(dst)], check=True, capture_output=True)
    elif method == "copy":
        shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copyfile, ignore=_special_files)
    else:
        _copy_tree(src, dst, link=True)
    return dst


def remove_dir(path: str | os.PathLike[str]) -> None:
    """Delete a work dir, including files a sandboxed command made read-only."""

    def onerror(func, p, _exc):  # noqa: ANN001, ANN202
        try:
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)
