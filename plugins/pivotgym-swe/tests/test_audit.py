"""``pivotgym swe audit``: every task's reference fix is solved and its bug is not, on a chosen backend; a task
whose reference fix no longer solves it is reported and the command exits 1; each bug is also put to the
host-observed oracle alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pivotgym.jsonl import write_jsonl
from pivotgym_swe.commands import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import humaneval_instance


def test_the_tiny_set_is_judged_right_on_each_backend(tiny_tasks, isolating_sandbox, capsys):
    code = main(["audit", "--tasks", str(tiny_tasks), "--sandbox", isolating_sandbox.name, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["sandbox"] == isolating_sandbox.name
    assert report["tasks"] == 2 and report["wrong"] == 0
    assert all(r["fixed"] and not r["unfixed"] for r in report["results"])
    # both bugs change what the function returns on generated inputs: the host's oracle rejects them alone
    assert report["host_rejects"] == 2 and all(r["host_rejects"] for r in report["results"])


def test_a_task_whose_reference_fix_fails_is_reported(tmp_path, isolating_sandbox, capsys):
    row = humaneval_instance()
    row["FAIL_TO_PASS"] = ["test_solution.py::test_no_such_test"]  # the fix cannot make a missing test pass
    path = tmp_path / "broken.jsonl"
    write_jsonl(path, [row])
    code = main(["audit", "--tasks", str(path), "--sandbox", isolating_sandbox.name])
    out = capsys.readouterr().out
    assert code == 1 and "WRONG broken/fixture__0: reference fix:" in out and "0 of 1 tasks" in out, out
