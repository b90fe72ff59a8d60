"""Are the shipped tasks still judged right? Every task's reference fix must be solved and its unfixed state not.

Run after a change to the judge, the sandbox or a runtime (``pivotgym swe audit``): each task's pristine tree
(the reference fix) and its materialised bug are judged by the same :func:`~pivotgym_swe.testing.judge` the env
uses, on the chosen backend. A fix that no longer scores 1 is a judge that now refuses something honest code
does (a kernel limit a project's tests need, a patch-check rule); a bug that scores 1 is a judge that lost its
teeth.

Each bug is also put to the host-observed oracle alone (:func:`~pivotgym_swe.differential.check_differential`:
generated calls and docstring examples, original and changed, against the reference's outcomes held on the
host). ``host_rejects`` says whether it rejects the bug without the tests: where it does not, the verdict on
that task rests on the tests run inside the judged process (docs/architecture.md, "Residual risk").
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pivotgym.sandbox import Sandbox, fork_dir, remove_dir
from pivotgym_swe.tasks import load_task_set, materialize, pristine_tree, task_file


@dataclass
class TaskAudit:
    """One task's two judgements: ``fixed`` (the reference fix) must be solved, ``unfixed`` must not."""

    instance_id: str
    task_set: str
    fixed: bool
    unfixed: bool
    detail: str = ""
    #: the host-observed oracle alone (no tests) rejects the unfixed state
    host_rejects: bool = False

    @property
    def ok(self) -> bool:
        return self.fixed and not self.unfixed

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def audit_tasks(
    task_sets: list[str], sandbox: Sandbox, *, tasks_path: str | None = None, progress: bool = True
) -> tuple[list[TaskAudit], float]:
    """Judge every task of ``task_sets`` (or of the JSONL file ``tasks_path``) fixed and unfixed on ``sandbox``;
    the per-task results and the seconds it took."""
    from tqdm import tqdm

    from pivotgym_swe.differential import check_differential
    from pivotgym_swe.testing import judge

    files = [Path(tasks_path)] if tasks_path else [task_file(name) for name in task_sets]
    rows = [(path.stem, row) for path in files for row in load_task_set(str(path))]
    scratch = Path(tempfile.mkdtemp(prefix="pivotgym-swe-audit-"))
    started = time.perf_counter()
    results: list[TaskAudit] = []
    try:
        for i, (name, row) in enumerate(tqdm(rows, desc="audit", unit="task", disable=not progress or None)):
            pristine = pristine_tree(row)
            fixed = judge(fork_dir(pristine, scratch / f"{i}-fixed"), row, pristine, sandbox=sandbox)
            bug = materialize(row, scratch / f"{i}-unfixed")
            unfixed = judge(bug, row, pristine, sandbox=sandbox)
            oracle = check_differential(bug, row, sandbox=sandbox, pristine=pristine)
            detail = "" if fixed.solved else f"reference fix: {fixed.summary}"
            if unfixed.solved:
                detail = (detail + "; " if detail else "") + "the unfixed state was solved"
            rejects = not oracle.ok and not oracle.infra
            results.append(TaskAudit(row["instance_id"], name, fixed.solved, unfixed.solved, detail, rejects))
    finally:
        remove_dir(scratch)
    return results, time.perf_counter() - started
