"""Verifiers for the SWE env.

``swe/functional`` is layered, cheapest first:

1. parse: the candidate is one well-formed tool call;
2. tool category: the same tool as the expert's;
3. target, per tool: ``view`` the same file with an overlapping line range; ``search`` a pattern whose hits
   (not too many) include one of the expert's hits; ``run`` the same test selection (a pytest run covering
   the expert's targets; other commands must match after whitespace normalisation);
4. effect: ``edit`` is applied, with the expert's edit, to two forks of the state at turn t; credited when
   the edited files are equal as normalised ASTs, or else when the hidden tests (FAIL_TO_PASS +
   PASS_TO_PASS, judged in the sandbox) have the same outcomes and, where the expert's edit solves the task,
   the candidate's state also agrees with the reference fix on the differential check
   (:func:`pivotgym_swe.differential.check_differential`: generated inputs and docstring examples, compared on
   the host); ``submit`` only when the state is solved.

``swe/name`` is the coarse reward (same tool name only); exact match is the core's ``exact``.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pivotgym import InvalidAction, Verdict
from pivotgym.sandbox import fork_dir, remove_dir
from pivotgym.types import tool_calls_of
from pivotgym.verify import VerifyContext, normalize_whitespace
from pivotgym_swe import tools
from pivotgym_swe.differential import check_differential
from pivotgym_swe.mutate import normalized_ast
from pivotgym_swe.tasks import pristine_tree
from pivotgym_swe.testing import judge

if TYPE_CHECKING:
    from pivotgym_swe.env import SWEEnv

SEARCH_MAX_HITS = tools.SEARCH_MAX_HITS


def _parse(candidate: Any) -> tuple[Any, Verdict | None]:
    try:
        return tools.parse_tool_call(candidate), None
    except InvalidAction as exc:
        return None, Verdict.fail(f"parse: {exc}", parse=False)


def _expert_call(context: VerifyContext):
    calls = tool_calls_of(context.turn.expert)
    if calls:
        return calls[0]
    return tools.parse_tool_call(context.expert_text)


def _tool_layer(context: VerifyContext, candidate: Any) -> tuple[Any, Any, Verdict | None]:
    """The cheap layers both verifiers share: parse the candidate, then compare its tool with the expert's.

    Returns (call, expert call, failing verdict or None)."""
    call, failure = _parse(candidate)
    if failure:
        return None, None, failure
    expert = _expert_call(context)
    if call.name != expert.name:
        return call, expert, Verdict.fail("tool_category", parse=True, tool=call.name, expected=expert.name)
    return call, expert, None


class NameVerifier:
    """Reward 1 when the candidate calls the same tool as the expert (the paper's coarse SWE reward)."""

    name = "swe/name"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        call, _expert, failure = _tool_layer(context, candidate)
        return failure or Verdict.ok("same_tool", parse=True, tool=call.name)


class FunctionalVerifier:
    """Credits actions that do what the expert's action does from the same state (see module docstring)."""

    name = "swe/functional"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        call, expert, failure = _tool_layer(context, candidate)
        if failure:
            return failure
        check = getattr(self, f"_{call.name}")
        return check(context, call.arguments, expert.arguments)

    # ---------------------------------------------------------------- per tool
    def _view(self, context: VerifyContext, cand: dict, exp: dict) -> Verdict:
        if _norm_path(cand["path"]) != _norm_path(exp["path"]):
            return Verdict.fail("target: different file", tool="view")
        a = _view_range(cand)
        b = _view_range(exp)
        if a[0] <= b[1] and b[0] <= a[1]:
            return Verdict.ok("same_region", tool="view")
        return Verdict.fail("target: no overlap with the expert's region", tool="view", got=a, expected=b)

    def _search(self, context: VerifyContext, cand: dict, exp: dict) -> Verdict:
        env = _swe_env(context)
        assert env.workdir is not None, "the env has no state: reset it or restore a snapshot first"
        try:
            got = tools.search_hits(env.workdir, cand["pattern"], cand.get("path", "."))
        except InvalidAction as exc:
            return Verdict.fail(f"target: {exc}", tool="search")
        try:
            want = tools.search_hits(env.workdir, exp["pattern"], exp.get("path", "."))
        except InvalidAction as exc:  # the state at turn t may defeat even the expert's search (a huge tree)
            return Verdict.fail(f"target: the expert's search fails here ({exc})", tool="search")
        if not got:
            return Verdict.fail("target: no hits", tool="search")
        if len(got) > max(SEARCH_MAX_HITS, len(want)):
            return Verdict.fail("target: too broad", tool="search", hits=len(got))
        if {(p, n) for p, n, _ in got} & {(p, n) for p, n, _ in want}:
            return Verdict.ok("same_hits", tool="search", hits=len(got))
        return Verdict.fail("target: none of the expert's hits", tool="search", hits=len(got))

    def _run(self, context: VerifyContext, cand: dict, exp: dict) -> Verdict:
        a, b = _pytest_targets(cand["command"]), _pytest_targets(exp["command"])
        if a is None or b is None:
            if normalize_whitespace(cand["command"]) == normalize_whitespace(exp["command"]):
                return Verdict.ok("same_command", tool="run")
            return Verdict.fail("target: different command", tool="run")
        covered = all(_covers(a, t) for t in b)
        if covered:
            return Verdict.ok("same_test_selection", tool="run")
        return Verdict.fail("target: different test selection", tool="run", got=sorted(a), expected=sorted(b))

    def _edit(self, context: VerifyContext, cand: dict, exp: dict) -> Verdict:
        env = _swe_env(context)
        assert env.workdir is not None, "the env has no state: reset it or restore a snapshot first"
        with tempfile.TemporaryDirectory(prefix="pivotgym-verify-") as tmp:
            a = fork_dir(env.workdir, Path(tmp) / "candidate")
            b = fork_dir(env.workdir, Path(tmp) / "expert")
            try:
                tools.edit(a, cand["path"], cand["old"], cand["new"])
            except InvalidAction as exc:
                return Verdict.fail(f"effect: the edit does not apply ({exc})", tool="edit")
            try:
                tools.edit(b, exp["path"], exp["old"], exp["new"])
            except InvalidAction as exc:
                return Verdict.fail(f"effect: the expert's edit does not apply here ({exc})", tool="edit")
            paths = {_norm_path(cand["path"]), _norm_path(exp["path"])}
            same_ast = all(
                normalized_ast(_read(a, p)) == normalized_ast(_read(b, p)) is not None or _read(a, p) == _read(b, p)
                for p in paths
            )
            if same_ast:
                return Verdict.ok("ast_equivalent", tool="edit")
            task = env.task
            assert task is not None
            pristine = pristine_tree(task.data)
            ja = judge(a, task.data, pristine, sandbox=env.sandbox)
            jb = judge(b, task.data, pristine, sandbox=env.sandbox)
            diff = ja.differential  # the judge's own comparison with the reference, when the tests passed
            # a run error that is only the differential's verdict is not a test error: the tests are compared first
            test_error = ja.run.error and not (diff is not None and not diff.ok and ja.run.error == diff.reason)
            same_tests = bool(
                not test_error
                and ja.run.outcomes
                and (ja.fail_to_pass, ja.pass_to_pass) == (jb.fail_to_pass, jb.pass_to_pass)
            )
            if same_tests and jb.solved and diff is None:  # the expert's edit fixes the task: so must this one
                diff = check_differential(a, task.data, sandbox=env.sandbox)
            remove_dir(a)
            remove_dir(b)
        broken = next((j.run.error for j in (ja, jb) if j.run.infrastructure_failure), None)
        if broken is not None:  # the judge could not run: no verdict on this edit, not a wrong one
            return Verdict.undecided_because(f"judge_failed: {broken}", tool="edit")
        if not same_tests:
            return Verdict.fail("effect: different test outcomes", tool="edit", got=ja.summary, expected=jb.summary)
        if diff is not None and not diff.ok:
            return Verdict.fail(
                "effect: the tests pass but the fix differs from the reference", tool="edit", differential=diff.reason
            )
        return Verdict.ok("same_tests_pass", tool="edit", summary=ja.summary)

    def _submit(self, context: VerifyContext, cand: dict, exp: dict) -> Verdict:
        verdict = _swe_env(context).judge()
        if verdict.solved:
            return Verdict.ok("solved", tool="submit")
        if verdict.run.infrastructure_failure:
            return Verdict.undecided_because(f"judge_failed: {verdict.run.error}", tool="submit")
        return Verdict.fail("submit_unsolved", tool="submit", summary=verdict.summary)


def _swe_env(context: VerifyContext) -> SWEEnv:
    """The context's env, which for these verifiers is an SWE env (a work dir, a sandbox, a judge)."""
    return cast("SWEEnv", context.env())


def _read(root: Path, rel: str) -> str:
    """The file's text through the tools' no-follow, bounded read ('' when it is missing or refused)."""
    try:
        return tools.read_file(root, rel)
    except (InvalidAction, OSError):
        return ""


def _norm_path(path: str) -> str:
    return str(Path(path.strip()).as_posix()).removeprefix("./").removeprefix("/repo/")


def _view_range(args: dict) -> tuple[int, int]:
    start = max(1, int(args.get("start", 1)))
    end = args.get("end")
    return start, int(end) if end is not None else start + tools.VIEW_MAX_LINES - 1


def _pytest_targets(command: str) -> set[str] | None:
    """The test targets of a pytest command (empty set = the whole suite); None if it is not pytest."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if "&&" in argv or ";" in argv or "|" in argv:
        return None
    try:
        i = next(i for i, a in enumerate(argv) if a in ("pytest", "py.test") or a.endswith("/pytest"))
    except StopIteration:
        return None
    targets, skip = set(), False
    for arg in argv[i + 1 :]:
        if skip:
            skip = False
            continue
        if arg in ("-k", "-m", "-p", "-c", "-o", "--deselect", "--rootdir", "-W"):
            skip = True
            continue
        if arg.startswith("-"):
            continue
        targets.add(_norm_path(arg))
    return targets


def _covers(selection: set[str], target: str) -> bool:
    if not selection:
        return True
    file = target.split("::")[0]
    return any(
        s == target or s == file or (("::" not in s) and file.startswith(s.rstrip("/") + "/")) for s in selection
    )
