"""A run records its provenance, and the same settings in two fresh processes give the same result files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: the only fields allowed to differ between two runs with the same settings: wall-clock measurements
#: (``seconds`` of an evaluation member, a profiling run, its attempts or a curve point; ``wall_seconds`` of a
#: training run's accounting; ``elapsed_s`` and ``states_per_s`` of the profiler's statistics)
TIME_FIELDS = frozenset({"seconds", "wall_seconds", "elapsed_s", "states_per_s"})
#: the result files compared: evaluations and their items, curves, accounting, data (profiles, pivots, selection)
RESULT_FILES = (
    "eval/*.json",
    "eval/*.jsonl",
    "train/*/curve.json",
    "train/*/accounting.json",
    "data/*.jsonl",
    "data/*.json",
)


def _without_time(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_time(v) for k, v in value.items() if k not in TIME_FIELDS}
    if isinstance(value, list):
        return [_without_time(v) for v in value]
    return value


def _results(root: Path) -> dict[str, Any]:
    out = {}
    for pattern in RESULT_FILES:
        for path in sorted(root.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            rows = (
                [json.loads(line) for line in text.splitlines() if line.strip()]
                if path.suffix == ".jsonl"
                else json.loads(text)
            )
            out[str(path.relative_to(root))] = _without_time(rows)
    return out


def _run(config: Path, out: Path, plugin_site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "experiment", str(config), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_two_processes_with_the_same_settings_write_the_same_results(
    mini_experiment, arith_registry, plugin_site, tmp_path
):
    # the ablations the vLLM run of paper.yaml's design leaves out (test_paper_vllm.py)
    config = mini_experiment(tmp_path / "mini.yaml", ablations=["random_turns", "exact_reward", "e2e_progress"])
    for name in ("a", "b"):  # the same settings: the same (fresh) run folder path, so model paths match too
        _run(config, tmp_path / "run", plugin_site)
        (tmp_path / "run").rename(tmp_path / name)
    first, second = _results(tmp_path / "a"), _results(tmp_path / "b")
    assert {
        "eval/base.json",
        "eval/pivot-s0.json",
        "train/pivot-s0/curve.json",
        "train/e2e-s0/accounting.json",
        "data/profiles-functional-s0.jsonl",
        "data/profiles-exact-s0.jsonl",
        "eval/random-turns-s0.json",
        "eval/exact-reward-s0.json",
        "eval/e2e-progress-s0.json",
    } <= set(first)
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], name

    recorded = json.loads((tmp_path / "a" / "config.json").read_text())["provenance"]
    assert set(recorded) >= {"code", "versions", "plugins", "torch_threads", "device", "dtype", "sampler"}
    assert recorded["sampler"] == "hf" and recorded["plugins"]["builtins"] and "arith" in recorded["plugins"]
    assert recorded["dtype"] == "float32" and recorded["mixed_precision"] == ["no"]  # CPU: auto means fp32
    assert set(recorded["versions"]) == {"pivotgym", "torch", "transformers"}
    assert recorded["code"]["dirty"] in (True, False, "unknown")
    report = (tmp_path / "a" / "report.md").read_text()
    assert "## Provenance" in report and f"torch threads {recorded['torch_threads']}" in report


def test_provenance_records_the_dtype_and_mixed_precision_the_config_asks_for():
    from pivotgym.experiment.config import ExperimentConfig
    from pivotgym.experiment.provenance import provenance_lines, run_provenance

    config = ExperimentConfig(
        name="x", env="arith/chain-v0", sampler_options={"dtype": "bfloat16"}, sft={"mixed_precision": "bf16"}
    )
    recorded = run_provenance(config)
    assert recorded["dtype"] == "bfloat16" and recorded["mixed_precision"] == ["bf16", "no"]
    assert "dtype bfloat16, training mixed precision bf16, no" in "\n".join(provenance_lines(recorded))


def test_code_revision_outside_a_checkout_is_unknown(tmp_path):
    from pivotgym.experiment.provenance import code_revision

    assert code_revision(tmp_path) == {"revision": "unknown", "dirty": "unknown"}
    here = code_revision()
    assert here["revision"] == "unknown" or len(here["revision"]) == 40
