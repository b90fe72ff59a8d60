"""The task synthesiser: real projects + AST mutations -> verified SWE-bench-style bug-fix instances.

For each project: run its test suite once on the pristine tree (the baseline), then try mutations in a
seeded order. A mutant is kept when some baseline-passing tests now fail (FAIL_TO_PASS, at most
``max_f2p``) and the module imports (no collection errors); PASS_TO_PASS are the other baseline-passing
tests of the same test files. Every kept instance is then verified through the judge: its tests fail on the
buggy state and pass once the reference fix (the expert's edit) is applied. The split is by source module
(``Project.test_split_modules``; for HumanEval, by problem number), so test bugs sit in code never seen in
training. Same seed, same projects -> the same instances.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pivotgym.sandbox import Limits, Sandbox, fork_dir, get_sandbox, remove_dir
from pivotgym_swe.differential import check_differential
from pivotgym_swe.mutate import Mutation, candidate_mutations, sample_mutations
from pivotgym_swe.sources import PROJECTS, Project, humaneval_files, humaneval_problems, humaneval_tree, repo_tree
from pivotgym_swe.testing import JUDGE_LIMITS, TestRun, is_test_path, judge, run_pytest

DEFAULT_QUOTAS = {"toolz": (12, 4), "more-itertools": (8, 4), "humanevalfix": (20, 10)}  # the shipped sets
HUMANEVAL_TEST_FROM = 130  # HumanEval/130.. form the test split
SCREEN_WALL_SECONDS = 30.0  # a mutant whose test run takes longer (an infinite loop, mostly) is rejected


@dataclass
class SynthConfig:
    seed: int = 0
    max_tries: int = 150
    max_f2p: int = 15


def unique_snippet(text: str, lineno: int, end_lineno: int, other: str | None = None) -> tuple[int, int]:
    """Grow the line range [lineno, end_lineno] until its text occurs once in ``text``."""
    lines = text.splitlines(keepends=True)
    a, b = lineno, end_lineno
    while True:
        snippet = "".join(lines[a - 1 : b])
        if text.count(snippet) == 1 or (a == 1 and b == len(lines)):
            return a, b
        if a > 1:
            a -= 1
        if text.count("".join(lines[a - 1 : b])) == 1:
            return a, b
        if b < len(lines):
            b += 1


def fix_edit(mutation: Mutation, clean: str) -> dict[str, str]:
    """The expert's repair: an exact ``edit(path, old, new)`` on the buggy file that restores ``clean``."""
    buggy = mutation.apply(clean)
    delta = mutation.mutated.count("\n") - mutation.original.count("\n")
    a, b = unique_snippet(buggy, mutation.lineno, mutation.end_lineno + delta)
    blines, clines = buggy.splitlines(keepends=True), clean.splitlines(keepends=True)
    old = "".join(blines[a - 1 : b])
    new = "".join(clines[a - 1 : b - delta])
    assert buggy.replace(old, new, 1) == clean
    return {"path": mutation.path, "old": old, "new": new}


def unified_patch(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=f"a/{path}", tofile=f"b/{path}"
        )
    )


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def _statement(repo: str, f2p: list[str], run: TestRun, lead: str = "") -> str:
    first = next((run.failures[n] for n in f2p if n in run.failures), "")
    tail = _ADDRESS.sub("0x...", "\n".join(first.strip().splitlines()[-25:]))  # object addresses vary by run
    tests = "\n".join(f"- {n}" for n in f2p[:10]) + (f"\n- ... and {len(f2p) - 10} more" if len(f2p) > 10 else "")
    return (
        f"{lead}Some tests of {repo} fail after a recent change to the library code.\n\nFailing tests:\n{tests}\n\n"
        f"Output of the first failing test:\n```\n{tail}\n```\n\nFix the library code (not the tests) so that "
        "these tests pass without breaking the others."
    )


def _instance_id(prefix: str, mutation: Mutation) -> str:
    digest = hashlib.sha256(f"{mutation.path}:{mutation.lineno}:{mutation.mutated}".encode()).hexdigest()[:8]
    return f"{prefix}__{mutation.function}-{mutation.operator.replace('_', '-')}-{digest}"


def _test_files(nodes: list[str]) -> list[str]:
    return sorted({n.split("::")[0] for n in nodes})


def screen_targets(module: str, tests: set[str]) -> list[str]:
    """The test files named after ``module`` (``toolz/_signatures.py`` -> ``test_signatures.py``): running
    only those keeps screening a mutant cheap. Empty when no test file matches (then the whole suite runs)."""
    stem = Path(module).stem.lstrip("_")
    return sorted({n.split("::")[0] for n in tests if Path(n.split("::")[0]).name == f"test_{stem}.py"})


def _in_targets(node: str, targets: list[str]) -> bool:
    file = node.split("::")[0]
    return any(file == t or file.startswith(t.rstrip("/") + "/") for t in targets)


def _try_mutant(
    pristine: Path,
    mutation: Mutation,
    clean: str,
    targets: list[str],
    deselect: list[str],
    sandbox: Sandbox,
    scratch: Path,
    limits: Limits | None = None,
) -> TestRun | None:
    """Run ``targets`` on a fork with the mutation applied; None when the run is unusable (error, timeout)."""
    work = fork_dir(pristine, scratch / f"m{abs(hash((mutation.path, mutation.lineno, mutation.mutated)))}")
    try:
        (work / mutation.path).write_text(mutation.apply(clean))
        run = run_pytest(
            work,
            targets,
            sandbox=sandbox,
            deselect=deselect,
            limits=limits or JUDGE_LIMITS.with_(wall_seconds=SCREEN_WALL_SECONDS),
        )
    finally:
        remove_dir(work)
    return None if run.error or run.timed_out or any(k.startswith("<collection>") for k in run.outcomes) else run


def verify_instance(instance: dict[str, Any], pristine: Path, sandbox: Sandbox) -> bool:
    """Fails on the buggy state, passes once the reference fix is applied (both judged in the sandbox), and the
    fixed state agrees with the pristine tree on the differential check (this also builds and caches the
    task's reference, :func:`pivotgym_swe.differential.check_differential`)."""
    mutation = Mutation(**instance["mutation"])
    with tempfile.TemporaryDirectory(prefix="pivotgym-verify-") as tmp:
        work = fork_dir(pristine, Path(tmp) / "repo")
        clean = (pristine / mutation.path).read_text()
        (work / mutation.path).write_text(mutation.apply(clean))
        before = judge(work, instance, pristine, sandbox=sandbox, differential=False)
        fix = instance["fix"]
        text = (work / fix["path"]).read_text()
        if text.count(fix["old"]) != 1:
            return False
        (work / fix["path"]).write_text(text.replace(fix["old"], fix["new"]))
        after = judge(work, instance, pristine, sandbox=sandbox, differential=False)
        agrees = after.solved and check_differential(work, instance, sandbox=sandbox, pristine=pristine).ok
        remove_dir(work)
    return not before.solved and not any(before.fail_to_pass.values()) and agrees


def baseline_passing(project: Project, pristine: Path, sandbox: Sandbox, scratch: Path) -> set[str]:
    """Node ids of the tests that pass on the pristine tree (the only ones a mutant may break)."""
    base_fork = fork_dir(pristine, scratch / "baseline")
    try:
        baseline = run_pytest(base_fork, list(project.test_paths), sandbox=sandbox, deselect=list(project.deselect))
    finally:
        remove_dir(base_fork)
    passing = {n for n, o in baseline.outcomes.items() if o == "passed"}
    if not passing:
        raise RuntimeError(f"{project.repo}: no test passes on the pristine tree ({baseline.error})")
    return passing


def source_files(pristine: Path) -> dict[str, str]:
    """The library modules of a tree that mutations may touch (tests and ``__init__.py`` excluded)."""
    return {
        str(p.relative_to(pristine)): p.read_text()
        for p in sorted(pristine.rglob("*.py"))
        if not is_test_path(str(p.relative_to(pristine))) and p.name != "__init__.py"
    }


def screen_mutant(
    project: Project,
    pristine: Path,
    mutation: Mutation,
    clean: str,
    split: str,
    passing: set[str],
    config: SynthConfig,
    sandbox: Sandbox,
    scratch: Path,
) -> dict[str, Any] | None:
    """The instance for one mutant, or None when it is rejected: it breaks no test (or more than
    ``max_f2p``), does not import, times out, or fails verification."""
    deselect = list(project.deselect)
    targets = screen_targets(mutation.path, passing) or list(project.test_paths)
    run = _try_mutant(pristine, mutation, clean, targets, deselect, sandbox, scratch)
    if run is None:
        return None
    ran = [n for n in passing if _in_targets(n, targets)]
    f2p = sorted(n for n in ran if not run.passed(n))
    if not 1 <= len(f2p) <= config.max_f2p:
        return None
    test_files = _test_files(f2p)
    p2p = sorted(n for n in passing - set(f2p) if n.split("::")[0] in test_files)
    instance = _make_instance(
        project.name,
        project.repo,
        project.source_spec(),
        mutation,
        clean,
        split,
        f2p,
        p2p,
        test_files,
        deselect,
        _statement(project.repo, f2p, run),
    )
    return instance if verify_instance(instance, pristine, sandbox) else None


def synth_project(
    project: Project,
    quotas: tuple[int, int],
    config: SynthConfig,
    *,
    sandbox: Sandbox | None = None,
    progress: Callable[[str], None] | None = None,
    tree: Path | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield verified instances for ``project`` until the (train, test) quotas are met or tries run out.

    ``tree`` overrides the pristine tree (default: the project's cached source, see :func:`repo_tree`)."""
    sandbox = sandbox or get_sandbox()
    pristine = Path(tree) if tree is not None else repo_tree(project)
    with tempfile.TemporaryDirectory(prefix="pivotgym-synth-") as tmp:
        scratch = Path(tmp)
        passing = baseline_passing(project, pristine, sandbox, scratch)
        files = source_files(pristine)
        need = {"train": quotas[0], "test": quotas[1]}
        tries = 0
        for mutation in sample_mutations(files, config.seed):
            if tries >= config.max_tries or not any(need.values()):
                break
            split = "test" if mutation.path in project.test_split_modules else "train"
            if need[split] <= 0:
                continue
            tries += 1  # only mutants actually run count against max_tries
            instance = screen_mutant(
                project, pristine, mutation, files[mutation.path], split, passing, config, sandbox, scratch
            )
            if instance is not None:
                need[split] -= 1
                if progress:
                    progress(f"{instance['instance_id']} [{split}] {len(instance['FAIL_TO_PASS'])} failing")
                yield instance


def _make_instance(
    prefix: str,
    repo: str,
    source: dict[str, Any],
    mutation: Mutation,
    clean: str,
    split: str,
    f2p: list[str],
    p2p: list[str],
    test_files: list[str],
    deselect: list[str],
    statement: str,
) -> dict[str, Any]:
    buggy = mutation.apply(clean)
    return {
        "instance_id": _instance_id(prefix, mutation),
        "repo": repo,
        "base_commit": None,
        "source": source,
        "split": split,
        "module": mutation.path,
        "problem_statement": statement,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "test_files": test_files,
        "test_cmd": "python -m pytest -q -p no:cacheprovider " + " ".join(test_files),
        "deselect": deselect,
        "mutation": mutation.to_dict(),
        "fix": fix_edit(mutation, clean),
        "patch": unified_patch(mutation.path, buggy, clean),
        "created_by": "pivotgym-swe synth",
    }


def synth_humaneval(
    quotas: tuple[int, int],
    config: SynthConfig,
    *,
    sandbox: Sandbox | None = None,
    progress: Callable[[str], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """HumanEvalFix-style instances: one verified bug per problem, in the canonical solution's body."""
    import random

    sandbox = sandbox or get_sandbox()
    problems = humaneval_problems()
    order = sorted(problems, key=lambda k: int(k.split("/")[1]))
    random.Random(config.seed).shuffle(order)
    need = {"train": quotas[0], "test": quotas[1]}
    with tempfile.TemporaryDirectory(prefix="pivotgym-synth-he-") as tmp:
        for task_id in order:
            if not any(need.values()):
                break
            split = "test" if int(task_id.split("/")[1]) >= HUMANEVAL_TEST_FROM else "train"
            if need[split] <= 0:
                continue
            pristine = humaneval_tree(task_id)
            clean = humaneval_files(task_id)["solution.py"]
            body_from = problems[task_id]["prompt"].count("\n") + 1
            muts = [m for m in candidate_mutations("solution.py", clean) if m.lineno >= body_from]
            random.Random(f"{config.seed}:{task_id}").shuffle(muts)
            for mutation in muts[:6]:
                run = _try_mutant(pristine, mutation, clean, ["test_solution.py"], [], sandbox, Path(tmp))
                if run is None or run.passed("test_solution.py::test_check"):
                    continue
                f2p = ["test_solution.py::test_check"]
                entry = problems[task_id]["entry_point"]
                lead = f"`{entry}` in solution.py does not do what its docstring says.\n\n"
                instance = _make_instance(
                    "humanevalfix",
                    task_id,
                    {"kind": "humaneval", "task_id": task_id},
                    mutation,
                    clean,
                    split,
                    f2p,
                    [],
                    ["test_solution.py"],
                    [],
                    _statement(f"{task_id} ({entry})", f2p, run, lead),
                )
                instance["instance_id"] = f"humanevalfix__{task_id.split('/')[1]}-{mutation.operator.replace('_', '-')}"
                if verify_instance(instance, pristine, sandbox):
                    need[split] -= 1
                    if progress:
                        progress(f"{instance['instance_id']} [{split}]")
                    yield instance
                    break


def synth_set(
    name: str,
    quotas: tuple[int, int] | None = None,
    config: SynthConfig | None = None,
    *,
    sandbox: Sandbox | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """All instances of one task set (``toolz``, ``more-itertools`` or ``humanevalfix``), sorted by id."""
    config = config or SynthConfig()
    quotas = quotas or DEFAULT_QUOTAS[name]
    if name == "humanevalfix":
        rows = list(synth_humaneval(quotas, config, sandbox=sandbox, progress=progress))
    else:
        rows = list(synth_project(PROJECTS[name], quotas, config, sandbox=sandbox, progress=progress))
    return sorted(rows, key=lambda r: (r["split"], r["instance_id"]))
