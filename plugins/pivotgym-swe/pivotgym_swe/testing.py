"""Running a repository's tests inside the sandbox, and judging a repaired state.

The judge never reads output the agent produced: it forks the state into a fresh directory, puts every
test file and test configuration back as it was in the pristine repository (so edited or added tests,
``conftest.py`` files and ini options do not count), and runs pytest in-process under a small runner that
reports per-test outcomes behind a random nonce given on stdin. pytest is imported before the repository
joins ``sys.path``, so a ``pytest.py`` planted in the repository cannot replace it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.sandbox import Limits, Sandbox, fork_dir, get_sandbox, remove_dir
from pivotgym.sandbox.bwrap import MOUNT_POINT

CONFIG_FILES = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py",
                "usercustomize.py")
JUDGE_LIMITS = Limits(wall_seconds=120, cpu_seconds=120, memory_bytes=4 << 30, max_processes=64,
                      file_size_bytes=64 << 20, output_bytes=4 << 20)

RUNNER = r"""
import json, sys
nonce = sys.stdin.readline().strip()
import pytest
root = sys.argv[1]
sys.path.insert(0, root)
results = {}
class Collect:
    def pytest_runtest_logreport(self, report):
        prev = results.get(report.nodeid)
        if report.when == "call" or report.outcome != "passed":
            if prev is None or prev[0] == "passed" or report.outcome == "failed":
                text = report.longreprtext[-1500:] if report.outcome == "failed" else ""
                results[report.nodeid] = (report.outcome, text)
    def pytest_collectreport(self, report):
        if report.outcome == "failed":
            results["<collection>:" + report.nodeid] = ("failed", report.longreprtext[-1500:])
args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-c", "/dev/null", "--rootdir", root,
        "-o", "addopts=", "--no-header", "-W", "ignore::DeprecationWarning"] + sys.argv[2:]
code = pytest.main(args, plugins=[Collect()])
sys.stdout.write("\n" + nonce + json.dumps({"exit": int(code), "results": results}) + "\n")
"""


@dataclass
class TestRun:
    """Per-test outcomes (``passed``/``failed``/``skipped``) of one sandboxed pytest run."""

    outcomes: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    timed_out: bool = False
    error: str = ""

    def passed(self, node: str) -> bool:
        return self.outcomes.get(node) == "passed"

    def to_dict(self) -> dict[str, Any]:
        return {"outcomes": self.outcomes, "exit_code": self.exit_code, "timed_out": self.timed_out,
                "error": self.error}


def run_pytest(workdir: Path, targets: Sequence[str], *, sandbox: Sandbox | None = None,
               limits: Limits | None = None, deselect: Sequence[str] = ()) -> TestRun:
    """Run pytest on ``targets`` (node ids or paths) in ``workdir`` inside the sandbox."""
    import sys

    sandbox = sandbox or get_sandbox()
    root = MOUNT_POINT if sandbox.name in ("bwrap", "docker") else str(workdir)
    argv = [sys.executable, "-I", "-c", RUNNER, root, *targets]
    for node in deselect:
        argv += ["--deselect", node]
    nonce = secrets.token_hex(16)
    result = sandbox.run(argv, workdir, limits=limits or JUDGE_LIMITS, stdin=nonce + "\n")
    run = TestRun(exit_code=result.returncode, timed_out=result.timed_out)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce):
            data = json.loads(line[len(nonce):])
            for node, (outcome, text) in data["results"].items():
                run.outcomes[node] = outcome
                if text:
                    run.failures[node] = text
            return run
    run.error = ("timed out" if result.timed_out else f"no test report (exit {result.returncode}): "
                 + result.stderr[-500:])
    return run


def is_test_path(rel: str) -> bool:
    """Whether a repository path belongs to the tests or their configuration (restored before judging)."""
    parts = rel.replace(os.sep, "/").split("/")
    name = parts[-1]
    return (name in CONFIG_FILES or name.startswith("test_") or name.endswith("_test.py")
            or any(p in ("tests", "test", "testing") for p in parts[:-1]))


def restore_tests(workdir: Path, pristine: Path) -> None:
    """Put the pristine tests and test configuration back into ``workdir``; drop any the agent added."""
    for dirpath, dirnames, filenames in os.walk(workdir):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), workdir)
            if is_test_path(rel) and not (pristine / rel).is_file():
                os.unlink(os.path.join(dirpath, name))
    for dirpath, _dirnames, filenames in os.walk(pristine):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), pristine)
            if is_test_path(rel):
                target = workdir / rel
                if target.is_symlink() or target.is_dir():
                    shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(os.path.join(dirpath, name), target)


@dataclass
class Judgement:
    solved: bool
    fail_to_pass: dict[str, bool]
    pass_to_pass: dict[str, bool]
    run: TestRun

    @property
    def summary(self) -> str:
        f2p = sum(self.fail_to_pass.values())
        p2p = sum(self.pass_to_pass.values())
        return (f"FAIL_TO_PASS {f2p}/{len(self.fail_to_pass)} pass, PASS_TO_PASS {p2p}/{len(self.pass_to_pass)} pass"
                + (f" ({self.run.error})" if self.run.error else ""))


def judge(workdir: Path, instance: dict[str, Any], pristine: Path, *, sandbox: Sandbox | None = None) -> Judgement:
    """Our own verdict on a state: fork it, restore the tests, run FAIL_TO_PASS + PASS_TO_PASS."""
    f2p, p2p = list(instance["FAIL_TO_PASS"]), list(instance["PASS_TO_PASS"])
    scratch = Path(tempfile.mkdtemp(prefix="pivotgym-judge-"))
    try:
        fork = fork_dir(workdir, scratch / "repo")
        restore_tests(fork, pristine)
        run = run_pytest(fork, sorted(set(f2p + p2p)), sandbox=sandbox)
    finally:
        remove_dir(scratch)
    f = {n: run.passed(n) for n in f2p}
    p = {n: run.passed(n) for n in p2p}
    return Judgement(bool(f) and all(f.values()) and all(p.values()) and not run.error, f, p, run)
