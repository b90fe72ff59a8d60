"""An aggregate disk limit on a work dir: the bytes (and inodes) all processes of a run may leave in it.

RLIMIT_FSIZE caps each file, not their number: eight 31 MB files in a second fit under a 32 MB rlimit. This
module measures a tree (allocated blocks, so sparse files count for what they occupy, plus a charge per
entry so a million empty files count too) and :class:`DiskWatch` polls it while a command runs, killing the
command's process group as soon as the tree is over the limit. It works on every backend and filesystem and
needs no privileges; the price is an overshoot of at most one poll interval of writing (``POLL_SECONDS``),
itself bounded by RLIMIT_FSIZE per open file. A tree that starts a run already over the limit is killed at
the first poll, so the overshoot cannot accumulate across runs.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

POLL_SECONDS = 0.05
ENTRY_BYTES = 4096  # charged per directory entry on top of its blocks (inodes are finite, and forks copy each)


def tree_usage(root: str | os.PathLike[str], stop_above: int | None = None) -> int:
    """Bytes used by the tree at ``root`` (blocks * 512 + ``ENTRY_BYTES`` per entry), symlinks not followed.
    Stops counting once the total exceeds ``stop_above``."""
    total = 0
    stack = [os.fspath(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512 + ENTRY_BYTES
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                if stop_above is not None and total > stop_above:
                    return total
    return total


class DiskWatch:
    """Poll ``root`` every ``POLL_SECONDS`` in a thread; call ``on_exceeded`` once when it is over ``limit``."""

    def __init__(self, root: Path, limit: int, on_exceeded: Callable[[], None]) -> None:
        self.root, self.limit, self.on_exceeded = root, int(limit), on_exceeded
        self.exceeded = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="pivotgym-disk-watch")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if tree_usage(self.root, self.limit) > self.limit:
                self.exceeded = True
                self.on_exceeded()
                return

    def stop(self) -> None:
        """Stop polling, then check once more (a burst written since the last poll counts as well)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if not self.exceeded and tree_usage(self.root, self.limit) > self.limit:
            self.exceeded = True
