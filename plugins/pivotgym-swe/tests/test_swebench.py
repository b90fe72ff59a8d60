"""SWE-bench proper: the engine-free parts (loading instances, test specs, the eval script, grading a log)
run everywhere; evaluating in the instance's image needs a reachable Docker engine and is skipped otherwise."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("swebench")

from pivotgym_swe import swebench as sb
from pivotgym_swe.swebench import APPLY_FAILED, eval_script, grade, load_instances, prediction_script
from pivotgym_swe.synth import unified_patch

EVAL = """#!/bin/bash
set -uxo pipefail
cd /testbed
git checkout abc123 tests/test_mod.py
git apply -v - <<'EOF_114329324912'
EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA tests/test_mod.py
: '>>>>> End Test Output'
git checkout abc123 tests/test_mod.py
"""


def instance(**changes) -> dict:
    row = {
        "instance_id": "octo__mod-1",
        "repo": "octo/mod",
        "version": "1.0",
        "base_commit": "abc123",
        "problem_statement": "mod.f is wrong",
        "image": "swebench/sweb.eval.x86_64.octo_1776_mod-1:latest",
        "FAIL_TO_PASS": json.dumps(["tests/test_mod.py::test_f"]),
        "PASS_TO_PASS": json.dumps(["tests/test_mod.py::test_g"]),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "eval_script": EVAL,
    }
    row.update(changes)
    return row


def test_load_instances_from_json_jsonl_and_parquet(tmp_path):
    rows = [instance(), instance(instance_id="octo__mod-2", FAIL_TO_PASS=["tests/test_mod.py::test_h"])]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "one.json").write_text(json.dumps(rows[0]))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    as_lists = [
        dict(r, **{k: json.loads(r[k]) if isinstance(r[k], str) else r[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")})
        for r in rows
    ]
    pd.DataFrame(as_lists).to_parquet(tmp_path / "a.parquet")  # list columns come back as numpy arrays
    for name in ("a.json", "a.jsonl", "a.parquet"):
        got = load_instances(tmp_path / name)
        assert [r["instance_id"] for r in got] == ["octo__mod-1", "octo__mod-2"], name
        assert got[0]["FAIL_TO_PASS"] == ["tests/test_mod.py::test_f"]  # JSON strings decoded to lists
        assert got[1]["FAIL_TO_PASS"] == ["tests/test_mod.py::test_h"]  # lists kept
        assert got[0]["PASS_TO_PASS"] == ["tests/test_mod.py::test_g"]
    assert load_instances(tmp_path / "one.json")[0]["instance_id"] == "octo__mod-1"


def test_load_instances_rejects_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([instance(problem_statement="")]))
    with pytest.raises(ValueError, match="lacks"):
        load_instances(bad)
    with pytest.raises(ValueError, match=r"\.json, \.jsonl or \.parquet"):
        load_instances(tmp_path / "instances.csv")


def test_test_spec_and_eval_script():
    spec = sb.test_spec(instance())
    assert spec.instance_id == "octo__mod-1" and spec.image.startswith("swebench/")
    assert spec.FAIL_TO_PASS == ["tests/test_mod.py::test_f"]
    script = eval_script(instance())
    assert "#!/bin/bash" not in script and "pytest -rA tests/test_mod.py" in script
    # swebench records the test command's own exit code next to the end marker
    lines = script.splitlines()
    end = next(i for i, line in enumerate(lines) if "End Test Output" in line)
    assert "=$?" in lines[end - 1]


def test_prediction_script_applies_the_patch_before_the_tests():
    patch = "--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    script = prediction_script(instance(), patch)
    assert script.index("+x = 2") < script.index("git apply -v /tmp/patch.diff") < script.index("pytest -rA")
    assert APPLY_FAILED in script
    with pytest.raises(ValueError, match="terminator"):
        prediction_script(instance(), "PIVOTGYM_PATCH_EOF\n")


def _log(tmp_path, f_status: str, g_status: str, name: str = "run.log"):
    path = tmp_path / name
    path.write_text(
        ">>>>> Applied Patch\n+ : '>>>>> Start Test Output'\n"
        "============================= test session starts ==============================\n"
        "collected 2 items\n\n"
        "=========================== short test summary info ============================\n"
        f"{f_status} tests/test_mod.py::test_f\n{g_status} tests/test_mod.py::test_g\n"
        "========================= 2 passed in 0.01s =========================\n"
        "+ : '>>>>> End Test Output'\n"
    )
    return path


def test_grade_resolves_only_when_fail_to_pass_and_pass_to_pass_pass(tmp_path):
    patch = "diff --git a/mod.py b/mod.py\n"
    ok = grade(instance(), _log(tmp_path, "PASSED", "PASSED"), patch)
    assert ok["resolved"] is True
    assert ok["report"]["tests_status"]["FAIL_TO_PASS"]["success"] == ["tests/test_mod.py::test_f"]
    assert grade(instance(), _log(tmp_path, "FAILED", "PASSED", "f.log"), patch)["resolved"] is False
    broke = grade(instance(), _log(tmp_path, "PASSED", "FAILED", "g.log"), patch)
    assert broke["resolved"] is False
    assert broke["report"]["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_mod.py::test_g"]


def test_grade_does_not_resolve_a_failed_apply_or_a_log_without_markers(tmp_path):
    failed = tmp_path / "apply.log"
    failed.write_text(f"{APPLY_FAILED}\nPASSED tests/test_mod.py::test_f\nPASSED tests/test_mod.py::test_g\n")
    report = grade(instance(), failed, "diff")
    assert report["resolved"] is False and report["report"]["patch_successfully_applied"] is False
    forged = tmp_path / "forged.log"  # test names printed outside the eval script's markers
    forged.write_text("PASSED tests/test_mod.py::test_f\nPASSED tests/test_mod.py::test_g\n")
    assert grade(instance(), forged, "diff")["resolved"] is False


def test_evaluate_prediction_in_docker():
    """With an engine and real instances (``PIVOTGYM_SWEBENCH_INSTANCES``: a JSON/JSONL/Parquet file whose
    first row has its gold ``patch`` and a pulled image), the gold patch resolves the instance."""
    import os

    from pivotgym.sandbox.docker import docker_available

    if not docker_available():
        pytest.skip("no reachable Docker engine: SWE-bench images cannot run here")
    path = os.environ.get("PIVOTGYM_SWEBENCH_INSTANCES")
    if not path:
        pytest.skip("set PIVOTGYM_SWEBENCH_INSTANCES to a SWE-bench instances file to evaluate a gold patch")
    first = load_instances(path)[0]
    report = sb.evaluate_prediction(first, first["patch"])
    assert report["resolved"], report


# ------------------------------------------------------------------------------------------ a real instance
# A small repository the test builds into a SWE-bench-style image on this engine (FROM the base image, the
# repository committed at /testbed, git, patch and pytest from Debian), with an instance row in SWE-bench's
# format: a test patch that adds the FAIL_TO_PASS test, an eval script with swebench's markers, graded by
# swebench's log parser.
MODULE = "def f(x):\n    return x - 1\n\n\ndef g():\n    return 2\n"
TESTS = "from mod import f, g\n\n\ndef test_g():\n    assert g() == 2\n"
FIXED = MODULE.replace("x - 1", "x + 1")
TEST_PATCH = unified_patch("tests/test_mod.py", TESTS, TESTS + "\n\ndef test_f():\n    assert f(1) == 2\n")
GOLD = unified_patch("mod.py", MODULE, FIXED)
INSTANCE_DOCKERFILE = """FROM {base}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends git patch python3-pytest \\
    && rm -rf /var/lib/apt/lists/*
COPY testbed /testbed
ENV GIT_AUTHOR_NAME=octo GIT_AUTHOR_EMAIL=octo@example.com GIT_AUTHOR_DATE=2024-01-01T00:00:00Z \\
    GIT_COMMITTER_NAME=octo GIT_COMMITTER_EMAIL=octo@example.com GIT_COMMITTER_DATE=2024-01-01T00:00:00Z
RUN cd /testbed && git init -q && git add -A && git commit -q -m base
"""


def forged(line: str) -> str:
    """A patch that keeps the bug and makes the test process print ``line`` and exit 0 after pytest's summary."""
    return (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import atexit, os, sys\n"
        f"+atexit.register(lambda: (sys.stdout.write({line!r} + chr(10)), sys.stdout.flush(), os._exit(0)))\n"
    )


@pytest.fixture(scope="module")
def real_instance():
    """The locally built instance: its image on this engine and its row (skipped, saying why, without one)."""
    from pivotgym.sandbox import DockerSandbox
    from pivotgym.sandbox.docker import unavailable_reason
    from pivotgym.sandbox.images import BASE_IMAGE, ImageBuildError, ImageRecipe, ensure_image

    problem = unavailable_reason()
    if problem:
        pytest.skip(f"docker backend: {problem}")
    files = {"testbed/mod.py": MODULE.encode(), "testbed/tests/test_mod.py": TESTS.encode()}
    recipe = ImageRecipe("swebench-octo-mod", INSTANCE_DOCKERFILE.format(base=BASE_IMAGE), files)
    try:
        image = ensure_image(recipe, log=lambda _line: None)
    except ImageBuildError as exc:  # the recipe's apt-get needs the Debian mirror the host's apt uses
        if any(s in str(exc) for s in ("Temporary failure resolving", "Could not resolve", "Failed to fetch")):
            pytest.skip(f"the instance image needs the Debian mirror, which this machine cannot reach: {exc}")
        raise
    head = DockerSandbox().run_in_image(image, ["git", "-C", "/testbed", "rev-parse", "HEAD"], read_only=True)
    commit = head.stdout.strip()
    assert head.returncode == 0 and len(commit) == 40, head.output
    script = (
        f"cd /testbed\ngit checkout {commit} tests/test_mod.py\n"
        f"git apply -v - <<'EOF_114329324912'\n{TEST_PATCH}EOF_114329324912\n"
        ": '>>>>> Start Test Output'\npython3 -m pytest -rA -p no:cacheprovider tests/test_mod.py\n"
        f": '>>>>> End Test Output'\ngit checkout {commit} tests/test_mod.py\n"
    )
    return instance(
        image=image,
        base_commit=commit,
        eval_script=script,
        test_patch=TEST_PATCH,
        patch=GOLD,
        FAIL_TO_PASS=["tests/test_mod.py::test_f"],
        PASS_TO_PASS=["tests/test_mod.py::test_g"],
    )


def test_a_real_instance_resolves_with_the_gold_patch_only(real_instance):
    from pivotgym.sandbox.docker import running_sandbox_containers

    gold = sb.evaluate_prediction(real_instance, GOLD)
    assert gold["resolved"], gold
    assert gold["report"]["tests_status"]["FAIL_TO_PASS"]["success"] == ["tests/test_mod.py::test_f"]
    unfixed = sb.evaluate_prediction(real_instance, unified_patch("mod.py", MODULE, MODULE + "# fixed\n"))
    assert unfixed["resolved"] is False
    assert unfixed["report"]["tests_status"]["FAIL_TO_PASS"]["failure"] == ["tests/test_mod.py::test_f"]
    broken = sb.evaluate_prediction(real_instance, unified_patch("mod.py", MODULE, FIXED.replace("2", "3")))
    assert broken["resolved"] is False and broken["report"]["patch_successfully_applied"], broken
    assert broken["report"]["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_mod.py::test_g"]
    assert running_sandbox_containers(this_process=True) == []


def test_a_patch_that_does_not_apply_is_not_resolved(real_instance):
    stale = GOLD.replace("-    return x - 1", "-    return x * 7")
    report = sb.evaluate_prediction(real_instance, stale)
    assert report["resolved"] is False and report["report"]["patch_successfully_applied"] is False


@pytest.mark.parametrize(
    "line",
    ["PASSED tests/test_mod.py::test_f", "PASSED tests/test_mod.py::test_f\n===== 2 passed in 0.01s ====="],
    ids=["one-line", "with-a-summary"],
)
def test_a_printed_pass_after_the_summary_is_not_a_resolve(real_instance, line):
    """The code under test prints a passing line for the failing test after pytest's own summary and exits 0
    (so swebench's exit-code cross-check sees success): the log then says both FAILED and PASSED for one test."""
    report = sb.evaluate_prediction(real_instance, forged(line))
    assert report["resolved"] is False and report["conflicts"] == ["tests/test_mod.py::test_f"], report
    assert report["report"]["resolved"] is True  # swebench's grading alone is fooled
