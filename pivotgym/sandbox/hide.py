"""Hiding host paths from sandboxed commands, and finding the paths worth hiding.

A sandbox shows some host trees read-only (the interpreter, its site-packages, ``/usr``), because the code
it runs needs them. Those trees can hold data a task must not see: an installed copy of the project whose
bug the agent is asked to fix, a vendored copy of it inside another package, a benchmark's reference
solutions. ``Sandbox.run(..., hide=[...])`` takes such host paths; a backend that shows a path replaces it
with an empty read-only directory (a directory) or an unreadable placeholder (a file: ``/dev/null`` bound on
a ``nodev`` mount, so opening it fails with "Permission denied") and skips paths it does not show anyway.

* :func:`hidden_targets` maps host paths onto the places a backend binds them (resolving symlinks on both
  sides, so ``/lib/x`` hides as ``/usr/lib/x`` where ``/lib`` is a link, and a venv reached through a
  symlink is still covered), drops paths nested in another hidden directory, and orders the rest.
* :func:`find_named` walks the visible trees once per process for directories of given names (every copy
  of a package, vendored ones included) and files of given suffixes (wheels, which are zip archives of
  packages); the walk takes about a second over ``/usr`` and a Python installation.

This is a deny-list: it hides what the caller names and what the walk finds by name. A copy under another
name (renamed vendoring, inside a tarball or an ``.egg`` zip) is not found; see the SWE plugin's README.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import lru_cache

from pivotgym.sandbox.walk import MAX_DEPTH


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def hidden_targets(paths: Iterable[str], roots: Sequence[str]) -> list[tuple[str, bool]]:
    """``(path inside the sandbox, is_dir)`` for every host path in ``paths`` that lies in a bound root.

    ``roots`` are host paths bound at the same path inside the sandbox. Missing paths and paths outside every
    root are dropped (the command cannot see them); so are paths inside another hidden directory (hiding the
    outer one covers them, and its empty replacement has no mount point for them)."""
    found: dict[str, bool] = {}
    for path in paths:
        host = os.path.abspath(path)
        if not os.path.lexists(host):
            continue
        is_dir = os.path.isdir(host)
        for candidate in {host, os.path.realpath(host)}:
            for root in roots:
                real_root = os.path.realpath(root)
                if _under(candidate, root):
                    found[candidate] = is_dir
                elif _under(candidate, real_root):
                    found[root.rstrip("/") + candidate[len(real_root.rstrip("/")) :]] = is_dir
    dirs = [p for p, d in found.items() if d]
    kept = {p: d for p, d in found.items() if not any(o != p and _under(p, o) for o in dirs)}
    return sorted(kept.items(), key=lambda item: (item[0].count("/"), item[0]))


@lru_cache(maxsize=32)
def find_named(
    roots: tuple[str, ...], names: frozenset[str], suffixes: tuple[str, ...] = (), max_depth: int = MAX_DEPTH
) -> tuple[str, ...]:
    """Every directory called one of ``names`` and every file ending in one of ``suffixes`` under ``roots``.

    Symlinks are not followed, ``__pycache__`` is skipped, and a matching directory is not descended into.
    The walk is iterative and stops ``max_depth`` levels below each root (no recursion, whatever the tree).
    The result is cached for the process (the trees are read-only installations, not work dirs)."""
    hits: list[str] = []
    for root in roots:
        stack = [(root, 0)]
        while stack:
            directory, depth = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    is_dir = entry.is_dir()  # a link to a directory counts as one (os.walk's view), unentered
                    is_link = entry.is_symlink()
                except OSError:
                    continue
                if is_dir:
                    if entry.name in names:
                        hits.append(entry.path)
                    elif entry.name != "__pycache__" and not is_link and depth < max_depth:
                        stack.append((entry.path, depth + 1))
                elif suffixes and entry.name.endswith(suffixes):
                    hits.append(entry.path)
    return tuple(sorted(set(hits)))
