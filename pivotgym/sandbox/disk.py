"""An aggregate disk limit on a work dir: the bytes (and inodes) all processes of a run may leave in it.

RLIMIT_FSIZE caps each file, not their number: eight 31 MB files in a second fit under a 32 MB rlimit. This
module measures a tree and :class:`DiskWatch` polls it while a command runs, killing the command's process
group as soon as the tree is over the limit. What a tree is charged:

* each entry its *apparent* size or its allocated blocks, whichever is larger (``max(st_size, st_blocks *
  512)``): a sparse file costs what it would cost once copied or read, so a 1 TiB file holding 4 KiB
  cannot slip under the cap and be multiplied later;
* plus ``ENTRY_BYTES`` per entry, so a million empty files count too (inodes are finite, forks copy each);
* a directory nested deeper than :data:`~pivotgym.sandbox.walk.MAX_DEPTH` levels is over the limit by
  itself (the walk does not enter it, so its contents could not be counted): the run is stopped and the
  host prunes the deep part afterwards (see :func:`pivotgym.sandbox.base.run_process`).

It works on every backend and filesystem and needs no privileges; the price is an overshoot of at most one
poll interval of writing (``POLL_SECONDS``), itself bounded by RLIMIT_FSIZE per open file. A tree that starts
a run already over the limit is killed at the first poll, so the overshoot cannot accumulate across runs.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pivotgym.sandbox.walk import MAX_DEPTH, walk

POLL_SECONDS = 0.05
ENTRY_BYTES = 4096  # charged per directory entry on top of its size (inodes are finite, and forks copy each)


@dataclass(frozen=True)
class Usage:
    """What :func:`measure` found: ``bytes`` charged, and whether a directory was nested too deep."""

    bytes: int
    too_deep: bool = False


def charge(st: os.stat_result) -> int:
    """What one entry costs against a disk cap: its apparent size or its blocks, whichever is larger."""
    size = st.st_size if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode) else 0
    return max(size, st.st_blocks * 512) + ENTRY_BYTES


def measure(root: str | os.PathLike[str], stop_above: int | None = None, max_depth: int = MAX_DEPTH) -> Usage:
    """Charge the tree at ``root`` (see the module doc), symlinks not followed; stops counting once the total
    exceeds ``stop_above`` or a directory deeper than ``max_depth`` is met."""
    total = 0
    try:
        for item in walk(root, max_depth):
            total += charge(item.st)
            if item.too_deep:
                return Usage(total, too_deep=True)
            if stop_above is not None and total > stop_above:
                break
    except OSError:  # the root is gone or unreadable: nothing to charge
        pass
    return Usage(total)


def tree_usage(root: str | os.PathLike[str], stop_above: int | None = None) -> int:
    """Bytes charged for the tree at ``root`` (see :func:`measure`), down to ``MAX_DEPTH`` levels."""
    return measure(root, stop_above).bytes


class DiskWatch:
    """Poll ``root`` every ``POLL_SECONDS`` in a thread; call ``on_exceeded`` once when it is over ``limit``
    (or nests directories deeper than ``max_depth``: then ``too_deep`` is set too)."""

    def __init__(self, root: Path, limit: int, on_exceeded: Callable[[], None], max_depth: int = MAX_DEPTH) -> None:
        self.root, self.limit, self.on_exceeded, self.max_depth = root, int(limit), on_exceeded, max_depth
        self.exceeded = False
        self.too_deep = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="pivotgym-disk-watch")
        self._thread.start()

    def _over(self) -> bool:
        usage = measure(self.root, self.limit, self.max_depth)
        if usage.too_deep:
            self.too_deep = True
        return usage.too_deep or usage.bytes > self.limit

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if self._over():
                self.exceeded = True
                self.on_exceeded()
                return

    def stop(self) -> None:
        """Stop polling, then check once more (a burst written since the last poll counts as well)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if not self.exceeded and self._over():
            self.exceeded = True
