"""Depth-bounded, iterative walks over trees a sandboxed command wrote, and their removal.

A work dir is written by untrusted code, so every host-side walk over it must survive any shape the code can
build: a directory nested 10,000 levels deep (its paths are longer than ``PATH_MAX``, and a recursive walk
raises ``RecursionError``), symlinks where directories were (never followed), entries that vanish mid-walk.

* :func:`walk` yields every entry of a tree, pre-order, with the descriptor of the directory holding it. It
  never recurses and never builds a path: each directory is opened relative to its parent's descriptor
  (``O_NOFOLLOW``), so depth costs descriptors (two per level), not path length. Directories nested deeper
  than ``max_depth`` are yielded once, marked ``too_deep``, and not entered.
* :func:`remove_tree` deletes a tree of *any* depth with a bounded number of open descriptors: a directory
  met deeper than :data:`REMOVE_FDS` levels is first moved up to the top of the tree. It never raises.
* :func:`prune` removes every directory nested deeper than ``max_depth`` (what a run left past the limit).

:data:`MAX_DEPTH` (64 levels of directories below the root) is the documented limit for work dirs: forks
refuse deeper trees, the disk watch stops a run that builds one, and the host prunes what it left. Source
trees of real projects stay far below it (SWE-bench repositories: about 12 levels).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from pivotgym.errors import SandboxError

MAX_DEPTH = 64
REMOVE_FDS = 32  # directory descriptors remove_tree holds at most; deeper directories are moved up first
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_rename_ids = itertools.count()


class TreeTooDeep(SandboxError):
    """A tree nests directories deeper than the walk allows (see :data:`MAX_DEPTH`)."""


@dataclass(frozen=True)
class Item:
    """One entry met by :func:`walk`: ``name`` inside the directory open as ``dir_fd`` (valid only until the
    walk moves on), at ``depth`` (1 = a child of the root), with its ``lstat`` result. ``too_deep`` marks a
    directory deeper than ``max_depth``, which the walk does not enter."""

    dir_fd: int
    name: str
    depth: int
    st: os.stat_result
    too_deep: bool = False

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


def open_dir(name: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """Open a directory for reading without following a symlink in its last component."""
    return os.open(name, _OPEN_DIR, dir_fd=dir_fd)


def walk(root: str | os.PathLike[str] | int, max_depth: int = MAX_DEPTH) -> Iterator[Item]:
    """Every entry under ``root`` (a path or an open directory descriptor, not closed), depth first, each
    directory right before its contents. Symlinks are reported, never followed; unreadable directories and
    entries that vanish are skipped. Raises ``OSError`` only when ``root`` itself cannot be opened."""
    own = not isinstance(root, int)
    root_fd = open_dir(root) if not isinstance(root, int) else root
    # one frame per open directory: (its descriptor, the iterator over its entries, its depth)
    stack: list[tuple[int, Iterator[os.DirEntry[str]], int]] = []
    try:
        stack.append((root_fd, os.scandir(root_fd), 0))
        while stack:
            fd, entries, depth = stack[-1]
            entry = next(entries, None)
            if entry is None:
                _close_frame(stack.pop(), root_fd)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            too_deep = is_dir and depth >= max_depth
            yield Item(fd, entry.name, depth + 1, st, too_deep)
            if is_dir and not too_deep:
                try:
                    child = open_dir(entry.name, fd)
                except OSError:
                    continue
                try:
                    stack.append((child, os.scandir(child), depth + 1))
                except OSError:
                    os.close(child)
    finally:
        for frame in reversed(stack):
            _close_frame(frame, root_fd)
        if own:
            os.close(root_fd)


def _close_frame(frame: tuple[int, Iterator[os.DirEntry[str]], int], root_fd: int) -> None:
    fd, entries, _ = frame
    close = getattr(entries, "close", None)
    if close is not None:
        close()
    if fd != root_fd:
        os.close(fd)


def tree_depth_error(root: str | os.PathLike[str], max_depth: int, what: str) -> TreeTooDeep:
    """The error forks and checks raise for a tree nested deeper than ``max_depth``."""
    return TreeTooDeep(
        f"cannot {what} {os.fspath(root)}: it nests directories more than {max_depth} levels deep "
        "(the limit for work dirs, pivotgym.sandbox.walk.MAX_DEPTH); delete the deep directories "
        "(rm -rf) and try again"
    )


# ------------------------------------------------------------------ removal
def remove_tree(path: str | os.PathLike[str]) -> bool:
    """Delete ``path`` (a tree of any depth, a file or a link; not followed) and return whether it is gone.

    Files a sandboxed command made read-only, and directories it made unreadable, are made accessible
    first. Never raises ``OSError``: what cannot be deleted is left and ``False`` returned."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    parent, name = os.path.split(os.path.abspath(path))
    try:
        parent_fd = open_dir(parent or "/")
    except OSError:
        return False
    try:
        return remove_at(parent_fd, name, is_dir=stat.S_ISDIR(st.st_mode))
    finally:
        os.close(parent_fd)


def remove_at(parent_fd: int, name: str, *, is_dir: bool | None = None) -> bool:
    """Delete the entry ``name`` of the directory open as ``parent_fd`` (see :func:`remove_tree`)."""
    if is_dir is None:
        try:
            is_dir = stat.S_ISDIR(os.lstat(name, dir_fd=parent_fd).st_mode)
        except FileNotFoundError:
            return True
        except OSError:
            return False
    if not is_dir:
        return _unlink(parent_fd, name)
    top = _open_for_removal(parent_fd, name)
    if top is None:
        return False
    try:
        _empty(top)
    finally:
        os.close(top)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _unlink(dir_fd: int, name: str) -> bool:
    for attempt in range(2):
        try:
            os.unlink(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return True
        except PermissionError:
            if attempt == 0 and not _make_accessible(dir_fd):
                return False
        except OSError:
            return False
    return False


def _make_accessible(fd: int) -> bool:
    """Give the owner full access to the directory open as ``fd`` (a sandbox may have removed it)."""
    try:
        mode = os.fstat(fd).st_mode & 0o7777
        if mode & 0o700 != 0o700:
            os.fchmod(fd, mode | 0o700)
            return True
    except OSError:
        pass
    return False


def _open_for_removal(parent_fd: int, name: str) -> int | None:
    try:
        fd = open_dir(name, parent_fd)
    except PermissionError:
        try:
            os.chmod(name, 0o700, dir_fd=parent_fd)  # a directory (checked), so nothing is followed
            fd = open_dir(name, parent_fd)
        except OSError:
            return None
    except OSError:
        return None
    _make_accessible(fd)
    return fd


def _empty(top: int) -> None:
    """Delete everything inside the directory open as ``top``, iteratively, holding at most ``REMOVE_FDS``
    descriptors: a directory met deeper than that is renamed into ``top`` and emptied from there."""
    # one frame per open directory: (descriptor, name in its parent, names that could not be deleted)
    stack: list[tuple[int, str, set[str]]] = [(top, "", set())]
    try:
        while stack:
            fd, _name, failed = stack[-1]
            descend = _clear_files(fd, top, failed, deep=len(stack) >= REMOVE_FDS)
            if descend is not None:
                child = _open_for_removal(fd, descend)
                if child is None:
                    failed.add(descend)
                else:
                    stack.append((child, descend, set()))
                continue
            stack.pop()
            if fd != top:
                os.close(fd)
                parent_fd, _, parent_failed = stack[-1]
                try:
                    os.rmdir(_name, dir_fd=parent_fd)
                except FileNotFoundError:
                    pass
                except OSError:
                    parent_failed.add(_name)
    finally:
        for fd, _, _ in stack:
            if fd != top:
                os.close(fd)


def _clear_files(fd: int, top: int, failed: set[str], *, deep: bool) -> str | None:
    """Delete the non-directories of the directory ``fd``; return the first subdirectory to enter (None when
    none is left). When ``deep``, subdirectories are moved into ``top`` instead of entered."""
    try:
        entries = os.scandir(fd)
    except OSError:
        return None
    with entries:
        for entry in entries:
            if entry.name in failed:
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if not is_dir:
                if not _unlink(fd, entry.name):
                    failed.add(entry.name)
                continue
            if not deep:
                return entry.name
            if not _move_up(fd, entry.name, top):
                failed.add(entry.name)
    return None


def _move_up(fd: int, name: str, top: int) -> bool:
    for _ in range(100):
        target = f".pivotgym-rm-{os.getpid()}-{next(_rename_ids)}"
        try:
            os.rename(name, target, src_dir_fd=fd, dst_dir_fd=top)
            return True
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):  # a directory of that name exists
                continue
            return False
    return False


def prune(root: str | os.PathLike[str], max_depth: int = MAX_DEPTH) -> int:
    """Delete every directory nested deeper than ``max_depth`` under ``root``; return how many were found."""
    found = 0
    try:
        for item in walk(root, max_depth):
            if item.too_deep:
                found += 1
                remove_at(item.dir_fd, item.name, is_dir=True)
    except OSError:
        pass
    return found
