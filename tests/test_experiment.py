"""A miniature experiment end to end: tiny model, the arith test domain, every stage, the report and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pivotgym.experiment import ExperimentError, load_experiment, run_experiment

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "configs"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=2)
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_shipped_configs_parse():
    for name in ("quickstart.yaml", "paper.yaml"):
        config = load_experiment(EXAMPLES / name)
        assert config.in_domain and config.seeds
    with pytest.raises(ExperimentError, match="unknown key"):
        bad = EXAMPLES.parent / "nope.yaml"
        try:
            bad.write_text("name: x\nenv: a/b-v0\nstepz: 3\n")
            load_experiment(bad)
        finally:
            bad.unlink()


def test_miniature_experiment_end_to_end(tiny_model_dir, arith_registry, tmp_path):
    config = {
        "name": "mini", "env": "arith/chain-v0", "model": str(tiny_model_dir), "seeds": [0], "train_tasks": 2,
        "ood": ["general/navigate-v0"], "executor": "serial",
        "eval": {"limit": 1, "max_new_tokens": 2, "batch_size": 4},
        "curve": {"tasks": 1, "every": 1, "max_turns": 2},
        "profile": {"k": 2, "max_new_tokens": 2},
        "select": {"min_var": -1.0, "max_mean": 1.1},  # admit every turn: a gibberish model has no pivots
        "sft": {"steps": 1, "trajectories_per_step": 2, "progress": False},
        "pivot": {"steps": 2, "group_size": 2, "pivots_per_step": 1, "max_new_tokens": 2, "eval_pivots": 1,
                  "eval_samples": 1, "progress": False},
        "e2e": {"steps": 2, "group_size": 2, "tasks_per_step": 1, "max_new_tokens": 2, "max_turns": 1,
                "eval_tasks": 1, "eval_samples": 1, "progress": False},
        "ablations": ["random_turns", "exact_reward"],
        "rl_init": "sft",  # RL starts from (and profiles with) the saved SFT model
    }
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump(config))
    root = tmp_path / "run"
    summary = run_experiment(load_experiment(path), out_dir=root)

    report = (root / "report.md").read_text()
    print("stage seconds:", json.loads((root / "timings.json").read_text()))  # shown with pytest -s
    for heading in ("Base / SFT / PivotRL / E2E RL", "Cost: PivotRL vs end-to-end RL", "Uninformative turns",
                    "Ablation", "The paper's claims at this scale"):
        assert heading in report
    for png in ("curve_turns.png", "curve_seconds.png", "turn_shares.png", "ablation.png"):
        assert (root / "plots" / png).stat().st_size > 5000  # a real figure, not an empty file
    assert set(summary["methods"]) == {"base", "sft", "pivot", "e2e"}
    base = json.loads((root / "eval" / "base.json").read_text())
    assert summary["methods"]["base"]["in_domain"] == base["scores"]["arith/chain-v0@test"]["value"]
    assert f"| base | {100 * base['scores']['arith/chain-v0@test']['value']:.1f} |" in report
    pivot_curve = json.loads((root / "train" / "pivot-s0" / "curve.json").read_text())
    e2e_curve = json.loads((root / "train" / "e2e-s0" / "curve.json").read_text())
    assert [p["step"] for p in pivot_curve] == [0, 1, 2] and [p["step"] for p in e2e_curve] == [0, 1, 2]
    meta = json.loads((root / "data" / "profiles-functional-s0.meta.json").read_text())
    assert pivot_curve[0]["turns"] == meta["turns"] > 0  # PivotRL pays for profiling up front
    assert pivot_curve[-1]["turns"] > pivot_curve[0]["turns"] and e2e_curve[-1]["turns"] > 0
    assert set(summary["ablation"]) == {"pivot", "random-turns", "exact-reward"}
    assert not (root / "train" / "pivot-s0" / "checkpoints").exists()
    assert (root / "models" / "sft-s0" / "config.json").exists()
    sft_start = json.loads((root / "eval" / "sft-s0-curve-score.json").read_text())["score"]
    assert pivot_curve[0]["score"] == e2e_curve[0]["score"] == sft_start
    assert "start from the SFT model" in report

    # resume: every stage's outputs exist, so a rerun only rebuilds the report (and is fast)
    before = {p: p.stat().st_mtime for p in (root / "eval").glob("*.json")}
    run_experiment(load_experiment(path), out_dir=root)
    assert {p: p.stat().st_mtime for p in (root / "eval").glob("*.json")} == before

    # more seeds later: `--seeds 0,1` keeps seed 0's results and the base eval, and adds seed 1
    from pivotgym.cli import main

    assert main(["experiment", str(path), "--out", str(root), "--seeds", "0,1", "--json"]) == 0
    assert {p: p.stat().st_mtime for p in (root / "eval").glob("*.json") if p in before} == before
    assert (root / "eval" / "pivot-s1.json").exists() and (root / "train" / "e2e-s1" / "curve.json").exists()
    assert "seeds 0, 1" in (root / "report.md").read_text()


@pytest.mark.parametrize("text, expected", [("0,1,2", [0, 1, 2]), (" 3, 1,3 ", [3, 1]), ("7", [7])])
def test_seeds_option_parses_a_comma_separated_list(text, expected):
    from pivotgym.eval_commands import parse_seeds

    assert parse_seeds(text) == expected


def test_seeds_option_rejects_junk_with_a_hint(tmp_path, capsys):
    from pivotgym.cli import main

    assert main(["experiment", str(EXAMPLES / "quickstart.yaml"), "--out", str(tmp_path), "--seeds", "zero"]) == 1
    assert "comma-separated integers" in capsys.readouterr().err and not list(tmp_path.iterdir())
