"""Running a repository's tests inside the sandbox, and judging a repaired state.

The agent controls every byte of the repository, and the code under test runs inside the test process. The
judge is built so that a verdict of "passed" needs the tests themselves to pass:

* **Fresh copy, pristine tests.** The state is forked into a scratch directory; every test file, test
  directory and test configuration in it is deleted (symlinks, FIFOs and all, never followed) and the
  pristine ones are copied in through a path of real directories only (a symlinked ``tests`` dir cannot
  redirect the copy to a host directory). Under bubblewrap the pristine test paths are also bind-mounted
  **read-only** over that copy, so code that runs during collection cannot rewrite a test file before it is
  imported. The pristine trees live in the host cache, which the sandbox never sees writable and the file
  tools cannot reach (they refuse every path that leaves the work dir).
* **A fresh process that trusts nothing of the repository.** ``python -I`` (no ``PYTHON*`` variables, no
  user site, no cwd on ``sys.path``; ``.pth`` and ``sitecustomize`` files in the repository are never read),
  test modules always compiled from source (every ``__pycache__``/``.pyc`` of the fork is deleted, and the
  runner never reads pytest's cached rewritten modules: they are keyed by the source's hash, which the agent
  knows, so a planted one would replace a pristine test),
  ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (no ``[pytest11]`` entry points, not even from a ``*.dist-info`` the
  agent planted), ``-p no:cacheprovider``, ``-c /dev/null`` and ``addopts=`` (no ini file or options of the
  repository), and only the pristine ``conftest.py`` files. pytest is imported before the repository joins
  ``sys.path``, and an import guard serves the repository's own top-level packages from the repository only,
  so deleting the buggy package cannot fall back to an installed copy of the project.
* **A static patch check first** (:mod:`pivotgym_swe.patch_check`): new modules, new import-time code, new
  imports of introspection/process modules and escape hatches in changed functions are refused with a reason
  before anything runs.
* **A gatekeeper in the test process** (:mod:`pivotgym_swe.judge_runner`): an audit hook installed first holds
  the record key (from stdin) and the outcome channel (the original stdout); it ends the process on
  tracing, ``gc`` walks, ``ctypes``, forks, ``/proc/self``, and on frame access from repository code; each
  test's outcome is written as it happens, with a sequence number and a keyed MAC (:func:`read_channel`).
  Printed output is never parsed.
* **No answer in sight.** The run hides every host copy of the unmutated project and of reference
  solutions the sandbox would otherwise show (:mod:`pivotgym_swe.leaks`).
* **Tamper evidence.** pytest's, ``_pytest``'s, pluggy's, ``json``'s and ``builtins``' functions and classes are
  recorded before the repository is importable and checked on every report and at the end.

The threat model, what each layer stops and the residual risk are in docs/architecture.md ("Untrusted code");
``tests/test_judge_attacks.py`` holds one attack per class against each layer alone, and
``tests/test_reward_hacking.py`` the generic ones through ``env.step``.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pivotgym.sandbox import (
    MOUNT_POINT,
    Limits,
    Mount,
    RunResult,
    Sandbox,
    SandboxError,
    fork_dir,
    get_sandbox,
    remove_at,
    remove_dir,
)
from pivotgym_swe.confine import prelude
from pivotgym_swe.judge_runner import code_digest
from pivotgym_swe.leaks import answer_paths
from pivotgym_swe.limits import JUDGE_LIMITS, RUNNER_ENV
from pivotgym_swe.patch_check import Rejection, check_patch
from pivotgym_swe.runtime import RuntimeBuildError, runtime_for, sandbox_for

if TYPE_CHECKING:  # differential.py runs its harness with this module's limits
    from pivotgym_swe.differential import DifferentialResult

CONFIG_FILES = (
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
)
TEST_DIRS = ("tests", "test", "testing")
#: the test process's text: the kernel-level confinement first (:mod:`pivotgym_swe.confine`), then the runner
RUNNER = prelude() + (Path(__file__).with_name("judge_runner.py")).read_text(encoding="utf-8")


@dataclass
class TestRun:
    """Per-test outcomes (``passed``/``failed``/``skipped``) of one sandboxed pytest run."""

    outcomes: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    timed_out: bool = False
    error: str = ""
    tampered: list[str] = field(default_factory=list)
    #: no trustworthy outcome for reasons outside the code under test (the sandbox could not start, the
    #: process limit was hit before the runner ran, the repository could not be copied): verification failed
    infrastructure_failure: bool = False

    def passed(self, node: str) -> bool:
        return self.outcomes.get(node) == "passed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcomes": self.outcomes,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "error": self.error,
            "tampered": self.tampered,
            "infrastructure_failure": self.infrastructure_failure,
        }


def top_level_names(tree: Path) -> list[str]:
    """The importable top-level names a tree provides (packages and modules), tests excluded."""
    names = []
    for entry in sorted(os.scandir(tree), key=lambda e: e.name):
        if entry.name.startswith((".", "_")) or entry.is_symlink() or is_test_path(entry.name):
            continue
        if entry.is_dir() and entry.name not in TEST_DIRS and entry.name.isidentifier():
            names.append(entry.name)
        elif entry.is_file() and entry.name.endswith(".py") and entry.name[:-3].isidentifier():
            names.append(entry.name[:-3])
    return names


def test_mounts(pristine: Path) -> list[Mount]:
    """Read-only mounts of the pristine tests over the work dir: whole test directories, else single files."""
    mounts = []
    for dirpath, dirnames, filenames in os.walk(pristine):
        rel = os.path.relpath(dirpath, pristine)
        for d in list(dirnames):
            if d in TEST_DIRS:
                mounts.append(Mount(os.path.join(dirpath, d), _inside(rel, d)))
                dirnames.remove(d)
        mounts += [
            Mount(os.path.join(dirpath, f), _inside(rel, f))
            for f in filenames
            if is_test_path(os.path.normpath(os.path.join(rel, f)))
        ]
    return mounts


def _inside(rel: str, name: str) -> str:
    return MOUNT_POINT + "/" + os.path.normpath(os.path.join(rel, name))


def run_pytest(
    workdir: Path,
    targets: Sequence[str],
    *,
    sandbox: Sandbox | None = None,
    limits: Limits | None = None,
    deselect: Sequence[str] = (),
    pristine: Path | None = None,
    hide: Sequence[str] = (),
    python: str | None = None,
) -> TestRun:
    """Run pytest on ``targets`` (node ids or paths) in ``workdir`` inside the sandbox.

    With ``pristine``, its test paths are mounted read-only over the work dir (bwrap, docker) and the top-level
    packages it provides are imported from the work dir only. ``hide`` lists host paths the run must not
    read (:func:`pivotgym_swe.leaks.answer_paths`). ``python`` is the interpreter inside the sandbox (default:
    this one). The outcome is read from the runner's channel (see :func:`read_channel`), never from what the
    tests print."""
    sandbox = sandbox or get_sandbox()
    isolated = sandbox.name in ("bwrap", "docker")
    root = MOUNT_POINT if isolated else str(workdir)
    names = ",".join(top_level_names(pristine or workdir))
    argv = [python or sys.executable, "-I", "-c", RUNNER, root, names, *targets]
    for node in deselect:
        argv += ["--deselect", node]
    mounts = test_mounts(pristine) if pristine is not None and isolated else []
    key = secrets.token_bytes(32)
    code = pristine_code(str(pristine), root) if pristine is not None else "{}"
    result = sandbox.run(
        argv,
        workdir,
        limits=limits or JUDGE_LIMITS,
        stdin=key.hex() + "\n" + code + "\n",
        env=RUNNER_ENV,
        mounts=mounts,
        hide=hide,
    )
    channel = read_channel(result.stdout, key)
    run = TestRun(exit_code=result.returncode, timed_out=result.timed_out)
    run.outcomes, run.failures, run.tampered = channel.outcomes, channel.failures, channel.tampered
    if channel.end is not None:
        run.exit_code = channel.end
    if result.timed_out:
        run.error = "timed out"
    elif channel.refused:
        run.error = f"the judge ended the run: the code under test attempted {channel.refused}"
    elif result.limit_hit:
        run.error = result.limit_message
    elif channel.end is None:
        run.error = f"no end record from the test process (exit {result.returncode}): " + result.stderr[-500:]
        run.infrastructure_failure = not channel.records and _could_not_start(result)
    elif result.returncode != 0:
        run.error = f"the test process exited {result.returncode} after its end record"
    if run.tampered and not run.error:
        run.error = "the code under test tampered with the judge: " + ", ".join(run.tampered[:8])
    return run


@lru_cache(maxsize=64)
def pristine_code(pristine: str, root: str) -> str:
    """The digest of every code object of the pristine test files, compiled as pytest compiles them in the
    test process (assertions rewritten, file names under ``root``), as the JSON the runner reads from stdin:
    ``{file: [[name, first line, digest], ...]}``. Done on the host, once per tree: the runner checks every
    test-file function a test reaches against it (see ``judge_runner``)."""
    from _pytest.assertion.rewrite import rewrite_asserts

    out: dict[str, list[tuple[str, int, str]]] = {}
    for dirpath, dirnames, filenames in os.walk(pristine):  # the host's pristine tree: shallow, trusted
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), pristine)
            if not (name.endswith(".py") and is_test_path(rel)):
                continue
            path = os.path.join(root, rel)
            try:
                source = Path(dirpath, name).read_bytes()
                tree = ast.parse(source, filename=path)
                rewrite_asserts(tree, source, path, None)
                todo = [compile(tree, path, "exec", dont_inherit=True)]
            except (OSError, SyntaxError, ValueError):
                continue
            codes = out.setdefault(path, [])
            while todo:
                code = todo.pop()
                codes.append((code.co_name, code.co_firstlineno, code_digest(code)))
                todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return json.dumps(out)


@dataclass
class Channel:
    """What the runner's outcome channel said. ``records`` counts the authentic records."""

    outcomes: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    refused: str = ""
    end: int | None = None
    records: int = 0


def read_channel(stdout: str, key: bytes) -> Channel:
    """Parse the runner's records: ``seq TAB kind TAB hex(field)... TAB mac`` per line.

    Only records whose keyed MAC checks and whose sequence numbers run 0, 1, 2, ... without a gap count. A test
    counts as passed only if every record of it says so and the test function was not seen to raise; any other
    line (or anything after the end record) is evidence of tampering, not data."""
    channel = Channel()
    raised: set[str] = set()
    for line in stdout.splitlines():
        body, _, mac = line.rpartition("\t")
        expected = hashlib.blake2b(body.encode(), key=key, digest_size=16).hexdigest()
        seq, _, rest = body.partition("\t")
        kind, _, rest = rest.partition("\t")
        fields: list[str] | None
        try:
            fields = [bytes.fromhex(f).decode("utf-8", "replace") for f in rest.split("\t")] if rest else []
        except ValueError:
            fields = None
        authentic = hmac.compare_digest(mac, expected) and seq == str(channel.records)
        if not authentic or fields is None or channel.end is not None or channel.refused:
            channel.tampered.append("a line in the outcome channel that the judge did not write")
            continue
        channel.records += 1
        if kind == "test" and len(fields) == 4:
            node, when, outcome, text = fields
            prev = channel.outcomes.get(node)
            if when == "call" or outcome != "passed":
                if prev is None or prev == "passed" or outcome == "failed":
                    channel.outcomes[node] = outcome
                    if text:
                        channel.failures[node] = text
        elif kind == "raised" and len(fields) == 1:
            raised.add(fields[0])
        elif kind == "tampered" and len(fields) == 1:
            channel.tampered.append(fields[0])
        elif kind == "refused" and len(fields) == 1:
            channel.refused = fields[0]
        elif kind == "end" and len(fields) == 1 and fields[0].lstrip("-").isdigit():
            channel.end = int(fields[0])
        else:
            channel.tampered.append(f"a malformed {kind[:20]!r} record")
    for node in raised:
        if channel.outcomes.get(node) == "passed":
            channel.outcomes[node] = "failed"
            channel.tampered.append(f"report of {node} says passed but the test raised")
    channel.tampered = list(dict.fromkeys(channel.tampered))
    return channel


def _could_not_start(result: RunResult) -> bool:
    """Whether a run that wrote nothing failed before the runner could start (not the code under test's doing):
    the sandbox could not exec or fork (exit 126/127, EAGAIN), or the process limit was hit."""
    text = result.stderr[-2000:]
    return (
        result.returncode in (126, 127)
        or result.limit_hit == "processes"
        or "Resource temporarily unavailable" in text
        or "Cannot fork" in text
    )


def is_test_path(rel: str) -> bool:
    """Whether a repository path belongs to the tests or their configuration (restored before judging)."""
    parts = rel.replace(os.sep, "/").split("/")
    name = parts[-1]
    return (
        name in CONFIG_FILES
        or name.startswith("test_")
        or name.endswith("_test.py")
        or any(p in TEST_DIRS for p in parts[:-1])
    )


def restore_tests(workdir: Path, pristine: Path) -> None:
    """Replace the tests and test configuration of ``workdir`` by the pristine ones, never following a link.

    Every test directory, test file and test config file of ``workdir`` goes (whatever its type: a symlink is
    unlinked, not followed); then each pristine test file is copied in through real directories only: a
    symlink or file standing where a directory should be is removed first."""
    for dirpath, dirnames, filenames in os.walk(workdir):  # does not descend into symlinked dirs
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                dirnames.remove(name)
                if name in TEST_DIRS or name == "__pycache__" or is_test_path(os.path.relpath(full, workdir)):
                    os.unlink(full)
            elif name in TEST_DIRS or name == "__pycache__":  # no bytecode the agent could have forged
                dirnames.remove(name)
                remove_dir(full)
        for name in filenames:
            full = os.path.join(dirpath, name)
            if is_test_path(os.path.relpath(full, workdir)) or name.endswith((".pyc", ".pyo")):
                os.unlink(full)
    for dirpath, _dirnames, filenames in os.walk(pristine):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), pristine)
            if is_test_path(rel):
                _copy_no_follow(Path(dirpath, name), workdir, rel)


def _copy_no_follow(src: Path, root: Path, rel: str) -> None:
    """Copy ``src`` to ``root/rel`` through directory fds opened with O_NOFOLLOW (anything else in the way goes)."""
    parts = Path(rel).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(part, dir_fd=fd)
                    os.mkdir(part, 0o755, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        try:
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            remove_at(fd, parts[-1], is_dir=True)
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        with os.fdopen(out, "wb") as dst, open(src, "rb") as source:
            shutil.copyfileobj(source, dst)
    finally:
        os.close(fd)


@dataclass
class Judgement:
    solved: bool
    fail_to_pass: dict[str, bool]
    pass_to_pass: dict[str, bool]
    run: TestRun
    rejections: list[Rejection] = field(default_factory=list)  # why the static patch check refused the state
    differential: DifferentialResult | None = None  # the host-side comparison with the reference, when it ran

    @property
    def summary(self) -> str:
        f2p = sum(self.fail_to_pass.values())
        p2p = sum(self.pass_to_pass.values())
        return f"FAIL_TO_PASS {f2p}/{len(self.fail_to_pass)} pass, PASS_TO_PASS {p2p}/{len(self.pass_to_pass)} pass" + (
            f" ({self.run.error})" if self.run.error else ""
        )


def _run_on_runtime(
    fork: Path, targets: list[str], source: dict[str, Any] | None, sandbox: Sandbox | None, pristine: Path
) -> TestRun:
    """The tests of ``fork`` on the source's allow-listed runtime (:mod:`pivotgym_swe.runtime`): the sandbox
    shows that runtime's interpreter, stdlib and test runner instead of the training environment."""
    try:
        runtime = runtime_for(source)
    except RuntimeBuildError as exc:  # e.g. pytest or ldd missing on the host
        return TestRun(error=f"no runtime to judge in: {exc}", infrastructure_failure=True)
    box = sandbox_for(runtime, sandbox or get_sandbox())
    return run_pytest(
        fork,
        targets,
        sandbox=box,
        pristine=pristine,
        hide=answer_paths(source, python_roots=getattr(box, "python_roots", None)),
        python=runtime.python_for(box),
    )


def judge(
    workdir: Path,
    instance: dict[str, Any],
    pristine: Path,
    *,
    sandbox: Sandbox | None = None,
    patch_check: bool = True,
    differential: bool = True,
) -> Judgement:
    """Our own verdict on a state: fork it, refuse it if the static patch check does
    (:mod:`pivotgym_swe.patch_check`), restore the tests, run FAIL_TO_PASS + PASS_TO_PASS under the
    gatekeeping runner, and, when they pass, compare the changed function with the reference fix on the host
    (:func:`pivotgym_swe.differential.check_differential`). ``patch_check=False`` and ``differential=False``
    exist to test the layers behind them, one at a time."""
    f2p, p2p = list(instance["FAIL_TO_PASS"]), list(instance["PASS_TO_PASS"])
    scratch = Path(tempfile.mkdtemp(prefix="pivotgym-judge-"))
    rejections: list[Rejection] = []
    diff: DifferentialResult | None = None
    try:
        try:
            fork = fork_dir(workdir, scratch / "repo", max_bytes=JUDGE_LIMITS.disk_bytes)
            restore_tests(fork, pristine)
        except (OSError, shutil.Error, SandboxError) as exc:  # a tree too deep or too big, an unreadable dir
            # the host running out of room is infrastructure; a tree the agent made uncopyable is the agent's doing
            host_trouble = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOMEM)
            run = TestRun(
                error=f"the repository could not be copied for judging: {str(exc)[:300]}",
                infrastructure_failure=host_trouble,
            )
        else:
            rejections = check_patch(fork, pristine, is_test_path) if patch_check else []
            if rejections:
                reasons = "; ".join(str(r) for r in rejections[:5])
                run = TestRun(error=f"the patch check refused the change ({len(rejections)}): {reasons}")
            else:
                run = _run_on_runtime(fork, sorted(set(f2p + p2p)), instance.get("source"), sandbox, pristine)
                if differential and not run.error and all(run.passed(n) for n in f2p + p2p):
                    from pivotgym_swe.differential import check_differential

                    diff = check_differential(fork, instance, sandbox=sandbox, pristine=pristine)
                    if not diff.ok:
                        run.error = diff.reason
                        run.infrastructure_failure = diff.infra
    finally:
        remove_dir(scratch)
    f = {n: run.passed(n) for n in f2p}
    p = {n: run.passed(n) for n in p2p}
    solved = bool(f) and all(f.values()) and all(p.values()) and not run.error
    return Judgement(solved, f, p, run, rejections, diff)
