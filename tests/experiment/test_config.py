"""The experiment config is checked whole, before anything runs or any folder is created."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pivotgym.errors import ConfigError
from pivotgym.experiment import ExperimentConfig, ExperimentError, load_experiment, run_experiment
from pivotgym.experiment.config import ProfileSection

HEAD = "name: x\nenv: arith/chain-v0\n"


@pytest.mark.parametrize(
    "section, line, dotted, suggestion",
    [
        ("select: {max_maen: 0.5}", 3, "select.max_maen", "max_mean"),
        ("eval: {limt: 3}", 3, "eval.limt", "limit"),
        ("curve: {metrc: turns}", 3, "curve.metrc", "metric"),
        ("pivot:\n  steps: 2\n  group_sise: 4", 5, "pivot.group_sise", "group_size"),
        ("profile: {kk: 4}", 3, "profile.kk", "k"),
        ("sampler_option: {dtype: float32}", 3, "sampler_option", "sampler_options"),
    ],
)
def test_a_misspelt_key_in_any_section_fails_before_anything_runs(
    section, line, dotted, suggestion, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + section + "\n")
    with pytest.raises(ConfigError) as info:
        run_experiment(load_experiment(path))
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: {dotted}: unknown key"), message
    assert f"did you mean {suggestion!r}" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]  # no run folder


@pytest.mark.parametrize(
    "section, dotted, instead",
    [
        ("pivot: {pivots: my.jsonl}", "pivot.pivots", "the profile stage"),
        ("sft: {model: other-model}", "sft.model", "the top-level `model`"),
        ("e2e: {seed: 3}", "e2e.seed", "the top-level `seeds`"),
        ("e2e: {env_id: other/env-v0}", "e2e.env_id", "the top-level `env`"),
        ("pivot: {sampler: vllm}", "pivot.sampler", "the top-level `sampler`"),
        ("e2e: {sampler_options: {dtype: float32}}", "e2e.sampler_options", "the top-level `sampler_options`"),
    ],
)
def test_a_trainer_field_the_experiment_sets_itself_is_an_error(section, dotted, instead, tmp_path):
    """Such a field would be silently overridden (pivots, env_id) or would break the comparison (model,
    seed): the error says where the experiment takes it from."""
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + section + "\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert str(info.value).startswith(f"{path}:3: {dotted}: is set by the experiment, from {instead}")


def test_experiment_error_is_the_config_error():
    assert ExperimentError is ConfigError


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("curve: {metric: loss}", r"exp.yaml:3: curve.metric: must be one of episodes, turns, got 'loss'"),
        ("seeds: many", r"exp.yaml:3: seeds\[0\]: expected an integer, got 'many'"),
        (
            "rl_init: sfft",
            r"exp.yaml:3: rl_init: must be one of base, sft, warmup, got 'sfft' \(did you mean 'sft'\?\)",
        ),
        ("ablations: [random_turns, exact]", r"exp.yaml:3: ablations.1: must be one of random_turns, exact_reward"),
        (
            "executor: proces",
            r"exp.yaml:3: executor: must be one of process, ray, serial, got 'proces' \(did you mean 'process'\?\)",
        ),
        ("executor: 'rya:10.0.0.1:6379'", r"exp.yaml:3: executor: must be one of process, ray, serial, got 'rya:"),
        (
            "sft: {report_to: [jsonl, tensorbord]}",
            r"exp.yaml:3: sft.report_to.1: must be one of auto, jsonl, none, tensorboard, wandb, got 'tensorbord' "
            r"\(did you mean 'tensorboard'\?\)",
        ),
        ("sft: {steps: ten}", r"exp.yaml:3: sft.steps: expected an integer, got 'ten'"),
        ("profile: {adaptive: {delta: x}}", r"exp.yaml:3: profile.adaptive.delta: expected a number"),
    ],
)
def test_bad_values_name_the_file_line_and_field(text, pattern, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + text + "\n")
    with pytest.raises(ConfigError, match=pattern):
        load_experiment(path)


def test_sections_given_as_mappings_are_checked_too():
    config = ExperimentConfig(name="x", env="a/b-v0", curve={"metric": "turns"}, select={"max_mean": 0.5})
    assert config.curve.metric == "turns" and config.select.max_mean == 0.5
    with pytest.raises(ConfigError, match=r"eval.limt: unknown key \(did you mean 'limit'\?\)"):
        ExperimentConfig(name="x", env="a/b-v0", eval={"limt": 3})
    with pytest.raises(ConfigError, match="pivot.group_sise: unknown key"):
        ExperimentConfig(name="x", env="a/b-v0", pivot={"group_sise": 4})


def test_profile_section_is_the_profilers_config_written_flat():
    """The section holds ProfileConfig's fields (its sampling written flat) with ProfileConfig's defaults, and
    to_config is the one way between them."""
    from pivotgym.pivot.profile import ProfileConfig

    names = {f.name for f in dataclasses.fields(ProfileSection)}
    profiler = {f.name: f.default for f in dataclasses.fields(ProfileConfig)}
    assert profiler.keys() - names == {"params", "verifier"}  # written flat / the stage's
    assert {n: ProfileSection.__dataclass_fields__[n].default for n in names & profiler.keys() - {"seed"}} == {
        n: profiler[n] for n in names & profiler.keys() - {"seed"}
    }
    config = ProfileSection(k=4, seed=None, temperature=0.7).to_config(seed=7, verifier="exact", cap=32)
    assert (config.k, config.seed, config.verifier) == (4, 7, "exact")
    assert (config.params.temperature, config.params.max_new_tokens) == (0.7, 32)
    assert ProfileSection(seed=3).to_config(seed=7, verifier="functional", cap=8).seed == 3


def test_the_profile_commands_defaults_are_the_profilers():
    import typer.main

    from pivotgym.cli.app import app
    from pivotgym.pivot.adaptive import AdaptiveK
    from pivotgym.pivot.profile import ProfileConfig

    command = typer.main.get_command(app).commands["profile"]  # type: ignore[attr-defined]
    defaults = {p.name: p.default for p in command.params}
    expected = {n: getattr(ProfileConfig, n) for n in ("k", "seed", "verifier", "timeout", "chunk")}
    expected |= {n: getattr(AdaptiveK, n) for n in ("max_mean", "min_pass_rate", "delta")}
    assert {n: defaults[n] for n in expected} == expected


def test_a_sampler_outside_the_registry_is_named(tmp_path):
    from pivotgym.experiment import check_ids

    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nenv: general/navigate-v0\nsampler: hff\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: sampler: unknown sampler 'hff' (did you mean 'hf'?)")):
        check_ids(load_experiment(path))


def test_a_sampler_that_cannot_follow_trained_weights_is_refused(tmp_path):
    from pivotgym.experiment import check_ids

    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nenv: general/navigate-v0\nsampler: openai\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: sampler: 'openai' cannot sample the models the run")):
        check_ids(load_experiment(path))
    path.write_text("name: x\nenv: general/navigate-v0\nsampler: vllm\nsampler_options: {max_model_len: 512}\n")
    check_ids(load_experiment(path))  # vllm follows them (a colocated engine); checked without building it


def test_the_run_sampler_and_its_options_reach_every_trainer(tmp_path):
    from pivotgym.experiment.run import Run
    from pivotgym.experiment.stages import trainer_kwargs
    from pivotgym.train import E2EConfig, PivotConfig, SFTConfig

    config = ExperimentConfig(
        name="x", env="arith/chain-v0", sampler="vllm", sampler_options={"max_model_len": 512}, pivot={"steps": 3}
    )
    run = Run(config, tmp_path / "run")
    for cls, section in ((SFTConfig, config.sft), (PivotConfig, config.pivot), (E2EConfig, config.e2e)):
        trainer = cls.from_dict(trainer_kwargs(run, section, 0, tmp_path / "out"))
        assert trainer.sampler == "vllm" and trainer.sampler_options == {"max_model_len": 512}
    assert PivotConfig.from_dict(trainer_kwargs(run, config.pivot, 0, tmp_path / "out")).steps == 3
    # with hf, the dtype loads the evaluated models; the trainers' live sampler keeps the model as trained
    run = Run(ExperimentConfig(name="x", env="arith/chain-v0", sampler_options={"dtype": "bfloat16"}), tmp_path / "b")
    assert SFTConfig.from_dict(trainer_kwargs(run, {}, 0, tmp_path / "out")).sampler_options == {}


def test_sampler_options_change_the_fingerprint_only_when_set():
    from pivotgym.experiment.fingerprint import stage_inputs as inputs_of
    from pivotgym.experiment.layout import STAGES

    def stage_inputs(config, stage, seed, _prints, verifiers):
        return inputs_of(config, stage, seed, dict.fromkeys(STAGES, "print"), verifiers)

    plain = ExperimentConfig(name="x", env="arith/chain-v0")
    inputs = stage_inputs(plain, "pivot", 0, {}, {})
    assert "sampler_options" not in inputs and not any(k.startswith("pivot.sampler") for k in inputs)
    tuned = dataclasses.replace(plain, sampler_options={"dtype": "float32"})
    assert stage_inputs(tuned, "pivot", 0, {}, {})["sampler_options.dtype"] == "float32"
    assert stage_inputs(tuned, "profile", 0, {}, {})["sampler_options.dtype"] == "float32"


def test_a_judged_reward_is_a_stage_input_and_its_arguments_are_checked_at_load(tmp_path):
    from pivotgym.experiment.fingerprint import fingerprint, stage_inputs
    from pivotgym.experiment.layout import STAGES

    prints = dict.fromkeys(STAGES, "print")
    plain = ExperimentConfig(name="x", env="arith/chain-v0")
    judged = ExperimentConfig(name="x", env="arith/chain-v0", verifier="functional|judge", judge={"votes": 3})
    for stage in ("profile", "pivot", "ablation"):
        inputs = stage_inputs(judged, stage, 0, prints, {})
        assert inputs["verifier"] == "functional|judge" and inputs["judge.votes"] == 3
        assert "verifier" not in stage_inputs(plain, stage, 0, prints, {})  # earlier runs keep their prints
    assert fingerprint(stage_inputs(judged, "sft", 0, prints, {})) == fingerprint(
        stage_inputs(plain, "sft", 0, prints, {})
    )
    with pytest.raises(ConfigError, match="did you mean 'votes'"):
        ExperimentConfig(name="x", env="arith/chain-v0", verifier="judge", judge={"vots": 3})
    with pytest.raises(ConfigError, match="no kind of action"):
        ExperimentConfig(name="x", env="arith/chain-v0", verifier="tool:judge|functional")
    path = tmp_path / "judged.yaml"
    path.write_text("name: x\nenv: arith/chain-v0\nverifier: judge\njudge: {sampler: openai, base_url: http://h/v1}\n")
    assert load_experiment(path).judge == {"sampler": "openai", "base_url": "http://h/v1"}


def test_a_field_added_at_its_old_behaviour_keeps_the_fingerprints_of_earlier_runs():
    from pivotgym.experiment.fingerprint import fingerprint, stage_inputs
    from pivotgym.experiment.layout import STAGES

    prints = dict.fromkeys(STAGES, "print")
    plain = ExperimentConfig(name="x", env="arith/chain-v0", ablations=["placebo", "e2e_expert_states"])
    inputs = stage_inputs(plain, "e2e", 0, prints, {})
    assert "e2e.start" not in inputs  # `start: reset` is what every run recorded before the field did
    written = dataclasses.replace(plain, e2e={"start": "reset"})
    assert fingerprint(stage_inputs(written, "e2e", 0, prints, {})) == fingerprint(inputs)
    expert = dataclasses.replace(plain, e2e={"start": "expert"})
    assert stage_inputs(expert, "e2e", 0, prints, {})["e2e.start"] == "expert"
    # the E2E ablation runs use the e2e section: it is an input of the ablation stage
    assert stage_inputs(expert, "ablation", 0, prints, {})["e2e.start"] == "expert"
    assert not any(
        k.startswith("e2e.")
        for k in stage_inputs(dataclasses.replace(plain, ablations=["placebo"]), "ablation", 0, prints, {})
    )


def test_the_experiment_command_overrides_the_sampler_before_anything_runs(tmp_path, capsys):
    from pathlib import Path

    from pivotgym.cli import main

    quickstart = Path(__file__).resolve().parents[2] / "examples" / "configs" / "quickstart.yaml"
    out = tmp_path / "run"
    assert main(["experiment", str(quickstart), "--out", str(out), "--sampler", "openai"]) == 1
    assert "sampler: 'openai' cannot sample the models the run trains" in capsys.readouterr().err
    assert main(["experiment", str(quickstart), "--out", str(out), "--sampler-option", "float32"]) == 1
    assert "--sampler-option 'float32': write KEY=VALUE" in capsys.readouterr().err
    assert not out.exists()


def test_a_ray_address_is_an_executor(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + "executor: 'ray:10.0.0.1:6379'\n")
    assert load_experiment(path).executor == "ray:10.0.0.1:6379"


@pytest.mark.parametrize(
    ("missing", "line", "message", "command"),
    [
        (
            "wandb",
            "pivot: {report_to: [jsonl, wandb]}",
            r"exp.yaml:3: pivot.report_to: wandb is not installed",
            "pip install wandb",
        ),
        ("ray", "executor: ray", r"exp.yaml:3: executor: ray is not installed", "pip install 'ray"),
    ],
)
def test_a_missing_optional_dependency_is_named_with_its_install_command_at_load(
    tmp_path, monkeypatch, missing, line, message, command
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + line + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_experiment(path)
    assert info.value.hint is not None and command in info.value.hint


def test_curve_points_spread_the_same_number_of_points_over_runs_of_any_length(tmp_path):
    from pivotgym.experiment.config import CurveSection, curve_steps
    from pivotgym.experiment.fingerprint import stage_inputs
    from pivotgym.experiment.layout import STAGES

    spread = CurveSection(metric="turns", points=4)
    assert curve_steps(spread, 10) == {2, 5, 8, 10}
    assert curve_steps(spread, 6) == {2, 3, 4, 6}
    assert curve_steps(spread, 4) == {1, 2, 3, 4}
    assert curve_steps(spread, 2) == {1, 2}  # fewer steps than points: every step
    assert curve_steps(CurveSection(every=3), 10) == {3, 6, 9, 10}  # `every`, and the last step always
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + "curve: {metric: turns, points: 4}\n")
    config = load_experiment(path)
    prints = dict.fromkeys(STAGES, "print")
    for stage in ("sft", "pivot", "e2e"):
        assert stage_inputs(config, stage, 0, prints, {})["curve.points"] == 4
    plain = ExperimentConfig(name="x", env="arith/chain-v0")
    assert "curve.points" not in stage_inputs(plain, "pivot", 0, prints, {})  # earlier runs keep their prints
    assert "curve.every" not in stage_inputs(plain, "sft", 0, prints, {})
    sparse = dataclasses.replace(plain, curve=CurveSection(every=3))
    assert stage_inputs(sparse, "sft", 0, prints, {})["curve.every"] == 3  # SFT's curve changes with it
    path.write_text(HEAD + "curve: {metric: turns, points: 4, every: 2}\n")
    with pytest.raises(ConfigError, match="curve.points: set curve.every or curve.points, not both"):
        load_experiment(path)
    path.write_text(HEAD + "curve: {points: 0}\n")
    with pytest.raises(ConfigError, match="must be at least 1"):
        load_experiment(path)
