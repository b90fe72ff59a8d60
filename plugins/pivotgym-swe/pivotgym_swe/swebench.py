"""SWE-bench proper: load real instances from a local file and evaluate patches with the ``swebench``
package's test specs, images and log parsers on the docker backend.

Engine-free parts (loading, normalising, building the test spec and the eval script, grading a log) work
anywhere; :func:`evaluate_prediction` needs a reachable Docker engine and the instance's image.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

from pivotgym import read_jsonl
from pivotgym.sandbox import DockerSandbox, Limits

LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")


def load_instances(path: str | Path) -> list[dict[str, Any]]:
    """SWE-bench instances from ``.json`` (a list), ``.jsonl`` or ``.parquet``, with list fields decoded."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pandas as pd

        rows = pd.read_parquet(path).to_dict(orient="records")
    elif path.suffix == ".jsonl":
        rows = read_jsonl(path)
    elif path.suffix == ".json":
        data = json.loads(path.read_text())
        rows = data if isinstance(data, list) else [data]
    else:
        raise ValueError(f"{path}: SWE-bench instances must be .json, .jsonl or .parquet")
    out = []
    for row in rows:
        row = dict(row)
        for key in LIST_FIELDS:
            value = row.get(key, [])
            row[key] = [str(v) for v in (json.loads(value) if isinstance(value, str) else value)]
        missing = [k for k in ("instance_id", "repo", "problem_statement") if not row.get(k)]
        if missing:
            raise ValueError(f"{path}: instance {row.get('instance_id', '?')} lacks {missing}")
        out.append(row)
    return out


def _harness(module: str) -> Any:
    """Import a ``swebench.harness`` module. Its package ``__init__`` imports the Modal backend; when the
    optional ``modal`` package is absent, that one submodule is replaced by a stub that raises on use."""
    if "swebench.harness.modal_eval" not in sys.modules:
        try:
            importlib.import_module("modal")
        except ImportError:
            stub = types.ModuleType("swebench.harness.modal_eval")

            def _unavailable(*_a: Any, **_k: Any) -> Any:
                raise RuntimeError("SWE-bench's Modal backend needs `pip install modal`")

            stub.run_instances_modal = _unavailable  # type: ignore[attr-defined]
            stub.validate_modal_credentials = _unavailable  # type: ignore[attr-defined]
            sys.modules["swebench.harness.modal_eval"] = stub
    return importlib.import_module(module)


def test_spec(instance: dict[str, Any]) -> Any:
    """swebench's TestSpec for an instance (needs ``image``, ``version``, ``eval_script``, ``log_parser``...)."""
    return _harness("swebench.harness.utils").make_test_spec(instance)


def eval_script(instance: dict[str, Any]) -> str:
    """The shell script that runs the instance's tests in its image."""
    return "\n".join(test_spec(instance).eval_script_list) + "\n"


def grade(instance: dict[str, Any], log_path: str | Path, model_patch: str = "") -> dict[str, Any]:
    """swebench's report for a test log of this instance: resolved or not, with per-test results; never resolved
    when the log gives a FAIL_TO_PASS or PASS_TO_PASS test both a passing and a failing status
    (:func:`conflicting_tests`), which swebench's parsers settle by the last line."""
    grading = _harness("swebench.harness.grading")
    spec = test_spec(instance)
    prediction = {"instance_id": instance["instance_id"], "model_patch": model_patch, "model_name_or_path": "pivotgym"}
    report = grading.get_eval_report(spec, prediction, str(log_path), include_tests_status=True)
    entry = report.get(instance["instance_id"], {})
    judged = set(instance["FAIL_TO_PASS"]) | set(instance["PASS_TO_PASS"])
    conflicts = [t for t in conflicting_tests(instance, Path(log_path).read_text(errors="replace")) if t in judged]
    return {
        "instance_id": instance["instance_id"],
        "resolved": bool(entry.get("resolved")) and not conflicts,
        "report": entry,
        "conflicts": conflicts,
    }


PASSING = ("PASSED", "XFAIL")
FAILING = ("FAILED", "ERROR")


def conflicting_tests(instance: dict[str, Any], log: str) -> list[str]:
    """Tests the test output (between swebench's markers) reports both passing and failing, line by line.

    Code under test can print a ``PASSED`` line for its failing test after pytest's summary and exit 0: the
    parser keeps the last status it reads, and the exit code swebench cross-checks is the forger's. A real run
    never reports one test both ways, so such a log resolves nothing. Parsers that need several lines for one
    status find nothing line by line, and then only swebench's own checks apply."""
    constants = _harness("swebench.harness.constants")
    spec = test_spec(instance)
    parser = _harness("swebench.harness.grading").PARSER_REGISTRY[spec.log_parser]
    if constants.START_TEST_OUTPUT in log:
        log = log.split(constants.START_TEST_OUTPUT, 1)[1].split(constants.END_TEST_OUTPUT, 1)[0]
    seen: dict[str, set[str]] = {}
    for line in log.splitlines():
        try:
            statuses = parser(line, spec)
        except Exception:  # a parser that cannot read a lone line: no evidence either way
            continue
        for test, status in statuses.items():
            seen.setdefault(test, set()).add(str(getattr(status, "value", status)))
    return sorted(t for t, got in seen.items() if got & set(PASSING) and got & set(FAILING))


APPLY_FAILED = ">>>>> Patch Apply Failed"  # swebench's marker: the grader then reports the patch as not applied
PATCH_END = "PIVOTGYM_PATCH_EOF"


def prediction_script(instance: dict[str, Any], model_patch: str) -> str:
    """The bash script run in the instance's image: apply ``model_patch`` to /testbed (``git apply``, then
    ``patch`` with fuzz), then the instance's eval script, as swebench runs it (``set -uxo pipefail``: the
    test-output markers are traced commands) with stderr joined to stdout, so the log keeps the order of what
    happened. A patch that applies neither way prints swebench's apply-failure marker and stops."""
    if PATCH_END in model_patch:
        raise ValueError(f"the patch contains the here-doc terminator {PATCH_END!r}")
    return (
        f"exec 2>&1\ncd /testbed\ncat > /tmp/patch.diff <<'{PATCH_END}'\n{model_patch.rstrip(chr(10))}\n{PATCH_END}\n"
        "git apply -v /tmp/patch.diff || patch --batch --fuzz=5 -p1 -i /tmp/patch.diff "
        f"|| {{ echo '{APPLY_FAILED}'; exit 1; }}\nset -uxo pipefail\n" + eval_script(instance)
    )


def evaluate_prediction(
    instance: dict[str, Any], model_patch: str, *, sandbox: DockerSandbox | None = None, limits: Limits | None = None
) -> dict[str, Any]:
    """Apply ``model_patch`` in the instance's image, run its eval script, grade the log (needs Docker)."""
    import tempfile

    sandbox = sandbox or DockerSandbox(
        limits=limits
        or Limits(
            wall_seconds=1800,
            cpu_seconds=None,
            memory_bytes=8 << 30,
            max_processes=4096,
            file_size_bytes=None,
            output_bytes=8 << 20,
        )
    )
    spec = test_spec(instance)
    result = sandbox.run_in_image(
        spec.image, ["/bin/bash", "-c", prediction_script(instance, model_patch)], limits=sandbox.limits
    )
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
        fh.write(result.stdout + result.stderr)
    graded = grade(instance, fh.name, model_patch)
    graded["timed_out"] = result.timed_out
    graded["log"] = fh.name
    return graded
