"""A miniature experiment end to end: tiny model, the arith test domain, every stage, the report and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivotgym.experiment import ExperimentError, check_ids, load_experiment, run_experiment
from pivotgym.experiment.config import ABLATIONS
from pivotgym.experiment.layout import ABLATION_TAGS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "configs"


def test_shipped_configs_parse(monkeypatch):
    from pivotgym.registry import reset_registry

    shipped = sorted(EXAMPLES.glob("*.yaml"))
    assert {"quickstart.yaml", "study.yaml", "paper.yaml", "quickstart-tau2.yaml", "paper-tau2.yaml"} <= {
        p.name for p in shipped
    }
    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(EXAMPLES.parent / "tau2"))  # paper-tau2's served-user variant
    reset_registry()
    try:
        for path in shipped:
            config = load_experiment(path)
            assert config.in_domain and config.seeds
            check_ids(config)
        assert load_experiment(EXAMPLES / "paper-tau2.yaml").env == "tau2-served/retail-v0"
    finally:
        monkeypatch.delenv("PIVOTGYM_ENV_PATH")
        reset_registry()
    paper = load_experiment(EXAMPLES / "paper.yaml")
    assert paper.sampler == "vllm" and paper.sampler_options["gpu_memory_utilization"] < 1
    check_ids(paper)  # vllm is registered and can follow the trained weights
    with pytest.raises(ExperimentError, match="unknown key"):
        bad = EXAMPLES.parent / "nope.yaml"
        try:
            bad.write_text("name: x\nenv: a/b-v0\nstepz: 3\n")
            load_experiment(bad)
        finally:
            bad.unlink()


def test_the_fp32_study_is_the_study_but_for_its_precision():
    # study-fp32.yaml is the committed run of the study on a CPU without bf16: a field changed in one file only
    # would make the committed results answer another design than study.yaml
    import yaml

    def fields(name: str, drop: set[str]) -> dict:
        data = yaml.safe_load((EXAMPLES / name).read_text())
        return {
            key: {k: v for k, v in value.items() if k not in drop} if isinstance(value, dict) else value
            for key, value in data.items()
            if key not in {"name", "sampler_options"}
        }

    study = yaml.safe_load((EXAMPLES / "study.yaml").read_text())
    assert study["sampler_options"] == {"dtype": "bfloat16"}
    assert all(study[s]["mixed_precision"] == "bf16" for s in ("warmup", "sft", "pivot", "e2e"))
    fp32 = yaml.safe_load((EXAMPLES / "study-fp32.yaml").read_text())
    assert "sampler_options" not in fp32 and not any(
        "mixed_precision" in v for v in fp32.values() if isinstance(v, dict)
    )
    assert fields("study-fp32.yaml", set()) == fields("study.yaml", {"mixed_precision"})


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_miniature_experiment_end_to_end(mini_experiment, arith_registry, tmp_path):
    # two E2E steps; every ablation; RL starts from (and profiles with) the saved SFT model
    path = mini_experiment(tmp_path / "mini.yaml", e2e={"steps": 2}, ablations=list(ABLATIONS))
    root = tmp_path / "run"
    summary = run_experiment(load_experiment(path), out_dir=root)

    report = (root / "report.md").read_text()
    print("stage seconds:", json.loads((root / "timings.json").read_text()))  # shown with pytest -s
    for heading in (
        "Base / SFT / PivotRL / E2E RL",
        "Cost: PivotRL vs end-to-end RL",
        "Uninformative turns",
        "Ablation",
        "The paper's claims at this scale",
    ):
        assert heading in report
    for png in ("curve_turns.png", "curve_seconds.png", "turn_shares.png", "ablation.png"):
        assert (root / "plots" / png).stat().st_size > 5000  # a real figure, not an empty file
    assert set(summary["methods"]) == {"base", "sft", "sft-more", "pivot", "e2e"}
    base = json.loads((root / "eval" / "base.json").read_text())
    assert summary["methods"]["base"]["in_domain"] == base["scores"]["arith/chain-v0@test"]["value"]
    assert f"| base | {100 * base['scores']['arith/chain-v0@test']['value']:.1f} |" in report
    # curve.max_turns caps the in-domain member of the suite too; its items feed the curve's first point
    assert base["scores"]["arith/chain-v0@test"]["max_turns"] == 2
    items = [json.loads(line) for line in (root / "eval" / "base.json.items.jsonl").open()]
    assert {r["member"] for r in items} == {"arith/chain-v0@test", "general/navigate-v0"}
    assert json.loads((root / "eval" / "base-curve-score.json").read_text())["from"] == "base.json.items.jsonl"
    assert {"pivot-vs-sft-in_domain", "pivot-vs-sft-more-in_domain", "sft-vs-base-ood"} <= set(summary["differences"])
    pivot_curve = json.loads((root / "train" / "pivot-s0" / "curve.json").read_text())
    e2e_curve = json.loads((root / "train" / "e2e-s0" / "curve.json").read_text())
    assert [p["step"] for p in pivot_curve] == [0, 1, 2] and [p["step"] for p in e2e_curve] == [0, 1, 2]
    meta = json.loads((root / "data" / "profiles-functional-s0.meta.json").read_text())
    assert pivot_curve[0]["turns"] == meta["turns"] > 0  # PivotRL pays for profiling up front
    assert pivot_curve[-1]["turns"] > pivot_curve[0]["turns"] and e2e_curve[-1]["turns"] > 0
    for tag, points in (("pivot", pivot_curve), ("e2e", e2e_curve)):  # final eval reuses the last curve point
        final = json.loads((root / "eval" / f"{tag}-s0.json").read_text())["scores"]["arith/chain-v0@test"]
        assert final["value"] == points[-1]["score"] and final["n"] == len(points[-1]["per_task"])
    for point in pivot_curve + e2e_curve:  # every point scores every curve task (the interval's unit)
        assert len(point["per_task"]) == 1 and point["score"] == sum(point["per_task"])

    # matched baselines: E2E RL samples exactly the expert tasks; continued SFT gets PivotRL's optimiser steps
    expert_ids = sorted({json.loads(line)["task_id"] for line in (root / "data" / "expert.jsonl").open()})
    assert sorted(json.loads((root / "train" / "e2e-s0" / "task_ids.json").read_text())) == expert_ids
    e2e_rows = [json.loads(line) for line in (root / "train" / "e2e-s0" / "metrics.jsonl").open()]
    acc = {
        tag: json.loads((root / "train" / f"{tag}-s0" / "accounting.json").read_text())
        for tag in ("sft", "sft-more", "pivot", "e2e")
    }
    assert (
        acc["sft"]["optimizer_steps"] + acc["sft-more"]["optimizer_steps"]
        == acc["sft"]["optimizer_steps"] + acc["pivot"]["optimizer_steps"]
        == 1 + 2
    )
    assert acc["e2e"]["tasks"] == len(expert_ids) and acc["pivot"]["rollout_turns"] >= meta["turns"]
    assert acc["sft-more"]["tokens_trained"] > 0 and acc["sft"]["rollout_turns"] == 0
    assert "What each method spent" in report and "| continued SFT | SFT |" in report
    assert (
        summary["accounting"]["sft-more"]["from_base"]["optimizer_steps"]
        == summary["accounting"]["pivot"]["from_base"]["optimizer_steps"]
    )
    assert set(summary["budget"]) == {
        "turns",
        "turns_trained",
        "seconds",
        "optimizer_steps",
        "tokens_trained",
        "lr_sum",
    }
    pivot_rows = {
        r["step"]: r
        for line in (root / "train" / "pivot-s0" / "metrics.jsonl").open()
        if (r := json.loads(line))
        if r["kind"] == "train"
    }
    for point in pivot_curve[1:]:  # every cost a budget can be matched on, as the trainer counted it
        row = pivot_rows[point["step"]]
        assert point["optimizer_steps"] == row["optimizer_steps_applied"]
        assert point["tokens_trained"] == row["tokens_trained"]
    applied = [r.get("lr", 0.0) for step, r in sorted(pivot_rows.items()) if not r.get("skipped")]
    assert pivot_curve[-1]["lr_sum"] == pytest.approx(sum(applied))  # the rates of the applied steps only
    assert not (root / "train" / "sft-s0" / "curve.json").exists()  # SFT is the RL start here: no curve of its own
    assert summary["budget"]["turns"]["tasks"] == 1 and e2e_rows
    assert "at matched" in report or "PivotRL − E2E RL" in report
    assert set(summary["ablation"]) == {"pivot", "e2e", *ABLATION_TAGS.values()}
    assert (root / "eval" / "e2e-progress-s0.json").exists() and "| E2E RL, progress reward |" in report
    assert "| E2E RL, from expert states |" in report
    from_states = root / "train" / "e2e-expert-states-s0"
    rows = [json.loads(line) for line in (from_states / "metrics.jsonl").open()]
    assert any(row.get("start_turn", 0) > 0 for row in rows)  # episodes started past the task's beginning
    assert "from states of their expert trajectories" in (from_states / "accounting.json").read_text()
    assert (root / "eval" / "placebo-s0.json").exists() and "| placebo (shuffled advantages) |" in report
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
    from pivotgym.cli.experiment import parse_seeds

    assert parse_seeds(text) == expected


def test_seeds_option_rejects_junk_with_a_hint(tmp_path, capsys):
    from pivotgym.cli import main

    assert main(["experiment", str(EXAMPLES / "quickstart.yaml"), "--out", str(tmp_path), "--seeds", "zero"]) == 1
    assert "comma-separated integers" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_matched_sft_steps_follow_the_rl_path():
    from pivotgym.experiment import ExperimentConfig, matched_sft_steps, rl_total_steps

    from_sft = ExperimentConfig(
        name="x", env="a/b-v0", rl_init="sft", sft={"steps": 10}, pivot={"steps": 6, "updates_per_batch": 2}
    )
    assert rl_total_steps(from_sft) == 22 and matched_sft_steps(from_sft) == 12
    from_base = ExperimentConfig(name="x", env="a/b-v0", rl_init="base", sft={"steps": 10}, pivot={"steps": 14})
    assert rl_total_steps(from_base) == 14 and matched_sft_steps(from_base) == 4
    assert matched_sft_steps(ExperimentConfig(name="x", env="a/b-v0", sft={"steps": 10}, pivot={"steps": 6})) == 0


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_warmup_model_is_every_methods_start_and_never_sees_the_training_data(
    mini_experiment, arith_registry, tmp_path
):
    path = mini_experiment(
        tmp_path / "mini.yaml", rl_init="warmup", warmup_tasks=1, warmup={"steps": 1}, curve={"points": 1}
    )
    root = tmp_path / "run"
    summary = run_experiment(load_experiment(path), out_dir=root)

    def task_ids(name: str) -> set[str]:
        return {json.loads(line)["task_id"] for line in (root / "data" / name).open()}

    training, warm = task_ids("expert.jsonl"), task_ids("warmup-expert.jsonl")
    assert len(training) == 2 and len(warm) == 1 and not training & warm  # a separate set
    assert (root / "models" / "warmup-s0" / "config.json").exists()
    warm_start = json.loads((root / "eval" / "warmup-s0-curve-score.json").read_text())["score"]
    for tag in ("pivot", "e2e", "sft"):  # the learning curves start at the warm-up model's score
        assert json.loads((root / "train" / f"{tag}-s0" / "curve.json").read_text())[0]["score"] == warm_start
    pivot_curve = json.loads((root / "train" / "pivot-s0" / "curve.json").read_text())
    assert [p["step"] for p in pivot_curve] == [0, 2]  # curve.points: 1 scores only the last of its 2 steps
    # SFT's curve: a point per step, its last the final evaluation's in-domain score; claim (b) along its budgets
    sft_curve = json.loads((root / "train" / "sft-s0" / "curve.json").read_text())
    final = json.loads((root / "eval" / "sft-s0.json").read_text())["scores"]["arith/chain-v0@test"]
    assert [p["step"] for p in sft_curve] == [0, 1] and final["value"] == sft_curve[-1]["score"]
    assert sft_curve[-1]["lr_sum"] > 0 and sft_curve[-1]["tokens_trained"] > 0
    assert set(summary["budget_sft"]) == {"optimizer_steps", "tokens_trained", "lr_sum", "seconds"}
    assert "PivotRL vs SFT along their budgets" in (root / "report.md").read_text()
    acc = {tag: summary["accounting"][tag] for tag in ("warmup", "sft", "pivot", "e2e", "sft-more")}
    assert acc["warmup"]["start"] == "base" and acc["sft"]["start"] == acc["pivot"]["start"] == "warmup"
    for tag in ("sft", "pivot", "e2e"):  # "from base" adds the warm-up model's cost to every method
        assert acc[tag]["from_base"]["optimizer_steps"] == acc[tag]["optimizer_steps"] + 1
    # the profile stage's model is the warm-up model: its record names the warm-up stage upstream
    record = json.loads((root / "stages" / "profile-s0.json").read_text())
    assert "upstream.warmup" in record["inputs"] and "upstream.sft" not in record["inputs"]
    report = (root / "report.md").read_text()
    assert "| warm-up |" in report and "`rl_init: warmup`" in report


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"rl_init": "warmup"}, "warmup_tasks: must be at least 1"),
        ({"rl_init": "warmup", "warmup_tasks": 2, "train_tasks": None}, "train_tasks: must be a number"),
        ({"eval": {"likelihood": True}}, "eval.likelihood: needs curve.metric: turns"),
    ],
)
def test_options_that_need_another_setting_say_so(mini_experiment, tmp_path, changes, message):
    with pytest.raises(ExperimentError, match=message):
        load_experiment(mini_experiment(tmp_path / "mini.yaml", **changes))


def test_e2e_samples_only_the_expert_tasks(tiny_model_dir, arith_registry, tmp_path):
    from pivotgym.experiment import expert_task_e2e
    from pivotgym.registry import make
    from pivotgym.train import E2EConfig

    all_ids = [t.id for t in make("arith/chain-v0").tasks("train")]
    chosen = [all_ids[3], all_ids[1]]
    cfg = E2EConfig(
        model=str(tiny_model_dir),
        env_id="arith/chain-v0",
        output_dir=str(tmp_path / "e2e"),
        steps=1,
        tasks_per_step=1,
        report_to=["none"],
        progress=False,
    )
    trainer = expert_task_e2e(cfg, chosen)
    trainer.setup_data()
    assert trainer.task_ids == chosen and len(all_ids) > 2
    drawn = {trainer.task_ids[i] for i in trainer.order.take(20)}
    assert drawn == set(chosen)
    bad = expert_task_e2e(cfg, ["not-a-task"])
    with pytest.raises(ExperimentError, match="not-a-task"):
        bad.setup_data()


class ScriptedSampler:
    """Answers each prompt with ``answer(prompt)``: a policy whose turn accuracy is known in advance."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def sample(self, prompts, n=1, params=None):
        from pivotgym.types import Completion

        return [[Completion(text=self.answer(p)) for _ in range(n)] for p in prompts]

    def describe(self):
        return {"model": "scripted", "revision": None, "backend": "test"}


def test_turn_accuracy_scores_held_out_expert_states(arith_registry, tmp_path):
    """Turn accuracy is 1 for a policy that plays the expert's action (or any action the functional verifier
    credits), 0 for one that never does, counts a failed verification apart, and uses only test tasks."""
    from pivotgym.experiment import ExperimentConfig, Run
    from pivotgym.registry import make

    config = ExperimentConfig(
        name="t",
        env="arith/chain-v0",
        executor="serial",
        curve={"metric": "turns", "tasks": 3},
        eval={"max_new_tokens": 8},
    )
    run = Run(config, tmp_path)
    held_out = run.held_out_trajectories()
    assert [t.task_id for t in held_out] == ["test-100", "test-101", "test-102"]  # the test split, never train
    assert (tmp_path / "data" / "test-expert.jsonl").exists()
    env = make("arith/chain-v0")
    experts = {}
    for traj in held_out:
        for turn in traj.turns():
            experts[str(env.prompt_messages(turn.prefix))] = turn.expert["content"]

    def expert(prompt):
        return experts[str(prompt)]

    def equivalent(prompt):
        return f"({experts[str(prompt)]}) + 0"

    try:
        point = run.curve_point(ScriptedSampler(expert))
        assert point["metric"] == "turns" and point["per_task"] == [1.0, 1.0, 1.0] and point["failed"] == 0
        assert point["states"] == sum(len(t.turns()) for t in held_out)
        assert run.curve_point(ScriptedSampler(lambda p: "7 apples"))["per_task"] == [0.0, 0.0, 0.0]
        first_task = {str(env.prompt_messages(turn.prefix)) for turn in held_out[0].turns()}
        mixed = run.curve_point(ScriptedSampler(lambda p: expert(p) if str(p) in first_task else "nope"))
        assert mixed["per_task"] == [1.0, 0.0, 0.0] and mixed["score"] == pytest.approx(1 / 3)
        assert run.curve_point(ScriptedSampler(equivalent))["score"] == 1.0
    finally:
        run.close()


def test_turn_metric_in_evaluation_keeps_episode_success_beside_it(arith_registry, tmp_path):
    from pivotgym.experiment import ExperimentConfig, Run

    config = ExperimentConfig(
        name="t",
        env="arith/chain-v0",
        executor="serial",
        curve={"metric": "turns", "tasks": 2, "max_turns": 3},
        eval={"max_new_tokens": 8},
    )
    run = Run(config, tmp_path)
    try:
        result = run.evaluate(ScriptedSampler(lambda p: "1"), tmp_path / "eval" / "scripted.json")
    finally:
        run.close()
    key = "arith/chain-v0@test"
    assert result["role"] == {key: "in_domain", f"{key}:episodes": "episodes"}
    assert result["scores"][key]["metric"] == "turn_accuracy" and result["scores"][key]["n"] == 2
    assert result["scores"][f"{key}:episodes"]["metric"] == "success"
    assert result["averages"]["in_domain"] == result["scores"][key]["value"]  # episodes are not averaged in
    assert run.curve_point_from_eval(tmp_path / "eval" / "scripted.json")["metric"] == "turns"


def test_profiling_is_capped_by_the_env_and_samplers_come_from_the_registry(arith_registry, tmp_path, monkeypatch):
    """``profile.max_new_tokens`` only shortens the env's own limit (no private default), and the profiling
    sampler is built by the sampler registry under the config's ``sampler`` name."""
    import pivotgym.pivot.profile as profile_module
    from pivotgym.experiment import ExperimentConfig, Run
    from pivotgym.experiment.stages import stage_expert, stage_profile

    config = ExperimentConfig(
        name="t", env="arith/chain-v0", executor="serial", train_tasks=2, profile={"max_new_tokens": 100, "k": 3}
    )
    run = Run(config, tmp_path)
    stage_expert(run)

    class Env:
        env_id, max_new_tokens = "arith/chain-v0", 8

    monkeypatch.setattr(run, "env", lambda **kwargs: Env())
    assert (run.generation_cap(100), run.generation_cap(4), run.generation_cap(None)) == (8, 4, 8)
    made = []
    monkeypatch.setattr(arith_registry, "make_sampler", lambda name, model, **kw: made.append((name, model)) or "S")
    seen = {}

    class Stop(Exception):
        pass

    def profile(trajectories, sampler, **kwargs):
        seen.update(kwargs, sampler=sampler)
        raise Stop

    monkeypatch.setattr(profile_module, "profile_trajectories", profile)
    with pytest.raises(Stop):
        stage_profile(run, seed=5)
    profiled = seen["config"]
    assert profiled.params.max_new_tokens == 8 and profiled.params.temperature == 1.0
    assert (profiled.k, profiled.seed, profiled.verifier, seen["sampler"]) == (3, 5, "functional", "S")
    assert made == [("hf", config.model)]


def test_likelihood_scores_of_a_model_on_the_held_out_states(tiny_sampler, tmp_path):
    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.run import Run

    config = ExperimentConfig(
        name="x", env="planning/blocks-v0", executor="serial", curve={"metric": "turns", "tasks": 1}
    )
    run = Run(config, tmp_path)
    floors = run.floors()
    assert floors["problems"] == 1 and floors["metrics"]["random_legal"]["mean"] > 0
    scored = run.likelihood_scores(tiny_sampler)
    assert scored["task_ids"] == floors["task_ids"]
    (p_credited,), (p_legal,) = scored["p_credited"], scored["p_legal"]
    assert 0 < p_credited <= p_legal <= 1  # a random model puts some mass on every action


def test_stages_without_the_report_exit_0_and_say_how_to_write_it(tmp_path, capsys, monkeypatch):
    """`--stages warmup` runs no report stage: the command succeeds and names the option that writes it."""
    import pivotgym.experiment
    from pivotgym.cli import main

    calls = []

    def stages_only(config, out_dir=None, stages=None, rerun=()):
        calls.append(stages)
        return {"name": config.name, "root": str(out_dir)}

    monkeypatch.setattr(pivotgym.experiment, "run_experiment", stages_only)
    assert main(["experiment", str(EXAMPLES / "quickstart.yaml"), "--out", str(tmp_path), "--stages", "warmup"]) == 0
    assert calls == [["warmup"]]
    assert "write the report with --stages report" in capsys.readouterr().out


def test_with_likelihood_on_a_curve_point_judges_the_answers_decoded_on_the_scoring_pass(tiny_sampler, tmp_path):
    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.run import Run

    def config(likelihood: bool) -> ExperimentConfig:
        return ExperimentConfig(
            name="x",
            env="planning/blocks-v0",
            executor="serial",
            curve={"metric": "turns", "tasks": 2},
            eval={"likelihood": likelihood, "max_new_tokens": 6},
        )

    generated = Run(config(False), tmp_path / "off").curve_point(tiny_sampler)
    run = Run(config(True), tmp_path / "on")
    point = run.curve_point(tiny_sampler)
    assert point["per_task"] == generated["per_task"] and point["states"] == generated["states"] > 0
    assert point["answered"] == point["states"] and generated["answered"] == 0  # nothing generated twice
    assert point["likelihood"] == run.likelihood_scores(tiny_sampler)
    # the evaluation of the same model reuses the point's likelihood scores instead of scoring again
    run.likelihood_scores = None  # type: ignore[method-assign]  # called again, this would raise
    result = run.evaluate(tiny_sampler, run.layout.result("probe"), members=[f"{run.config.env}@test"], in_domain=point)
    assert result["scores"][f"{run.config.env}@test:p_credited"]["value"] == pytest.approx(
        sum(point["likelihood"]["p_credited"]) / len(point["likelihood"]["p_credited"])
    )


def test_floors_whose_every_verification_failed_stop_the_run_with_the_reason(tmp_path, monkeypatch):
    """Not "does not enumerate legal actions": the legal actions were there, the verifier workers failed."""
    import pivotgym.eval.floors as floors_module
    from pivotgym.errors import PivotgymError
    from pivotgym.eval.floors import FloorsResult, StateFloor
    from pivotgym.experiment import ExperimentConfig
    from pivotgym.experiment.run import Run

    state = StateFloor("t", "t#0", 0, ["(a)"], [0.0], 0.0, failed=2, failed_reasons=["verify_failed: worker died"])
    broken = FloorsResult("planning/blocks-v0", "test", "v", 1.0, [state], [], {}, no_legal=0, failed=1, elapsed_s=0)
    monkeypatch.setattr(floors_module, "floors", lambda *a, **k: broken)
    config = ExperimentConfig(
        name="x", env="planning/blocks-v0", executor="serial", curve={"metric": "turns", "tasks": 1}
    )
    with pytest.raises(PivotgymError, match="verification of every held-out state failed.*worker died"):
        Run(config, tmp_path).floors()
