"""The SWE plugin's cache folder and the one way a tree is built into it (atomically, race-safe).

Sources (pristine repositories, sdists) and runtimes (the interpreters tests run with) both live here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["build_atomically", "cache_root"]


def cache_root() -> Path:
    root = Path(os.environ.get("PIVOTGYM_CACHE") or Path.home() / ".cache" / "pivotgym") / "swe"
    root.mkdir(parents=True, exist_ok=True)
    return root


def build_atomically(target: Path, build, complete=None) -> Path:
    """Build a tree in a temporary directory beside ``target`` and rename it into place, so concurrent first
    uses are safe: when another builder wins the race, its tree is kept (``complete(target)`` says a tree is
    whole; by default, that it exists)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (complete(target) if complete else target.is_dir()):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
