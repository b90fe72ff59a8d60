"""Every script in benchmarks/ runs at toy size, so none can rot: smoke mode (``PIVOTGYM_BENCH_SMOKE=1``,
benchmarks/_smoke.py) gives each its smallest real run (fewest items, one repeat, the tiny random Llama for a
model) and each must exit 0 having printed its figures, or ``skipped:`` and why where it needs what a test run
cannot have (a vLLM venv, a finished experiment run). A new script is picked up by the glob.

The selected scripts run one after the other in one subprocess (``python benchmarks/_smoke.py NAME...``), so
torch's and transformers' imports (~10 s here) and the tiny model are paid for once: all 21 take ~80 s on
2 shared CPU cores. Each script has its own time limit inside that process; the subprocess has an overall one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
#: seconds one script may take in smoke mode (the slowest takes ~20 s here), and the whole run
PER_SCRIPT_S = 180
TOTAL_S = 900


def _selected(request: pytest.FixtureRequest) -> list[str]:
    """The scripts whose cases this session runs (all of them, unless -k or a node id picked some)."""
    names = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and item.path == request.path and "script" in callspec.params:
            names.append(callspec.params["script"])
    return sorted(set(names)) or SCRIPTS


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{script: {"code", "seconds", "stdout", "stderr"}}`` of one smoke run of the selected scripts."""
    out = tmp_path_factory.mktemp("bench-smoke") / "results.json"
    argv = [sys.executable, str(BENCHMARKS / "_smoke.py"), *_selected(request), "--json-out", str(out)]
    env = {**os.environ, "PIVOTGYM_BENCH_SMOKE": "1"}
    try:
        run = subprocess.run(
            [*argv, "--timeout", str(PER_SCRIPT_S)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TOTAL_S
        )
        log = run.stderr
    except subprocess.TimeoutExpired as exc:
        log = f"the smoke run passed {TOTAL_S} s and was stopped\n{exc.stderr or ''}"
    print(log)  # each script's exit status and seconds (shown with -s, or for a failing case)
    results = json.loads(out.read_text()) if out.exists() else []
    return {"runs": {r["script"]: r for r in results}, "log": log}


def test_benchmarks_are_found():
    assert len(SCRIPTS) >= 21, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_reads_smoke_mode(script):
    """A script that does not take its toy sizes from benchmarks/_smoke.py would run at full size here."""
    text = (BENCHMARKS / script).read_text(encoding="utf-8")
    assert "from _smoke import" in text, f"benchmarks/{script}: give it toy defaults with _smoke.parse_args"


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_at_toy_size(script, smoke_runs):
    result = smoke_runs["runs"].get(script)
    assert result is not None, f"{script} did not finish; the runner's log:\n{smoke_runs['log'][-4000:]}"
    output = f"--- stdout\n{result['stdout'][-4000:]}\n--- stderr\n{result['stderr'][-4000:]}"
    assert result["code"] == 0, f"{script} exited {result['code']} in smoke mode ({result['seconds']} s)\n{output}"
    assert result["stdout"].strip(), f"{script} printed nothing\n{output}"
