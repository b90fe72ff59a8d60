"""CLI error edges (issue 16): each bad input is one ``error:`` line naming the file, field or id, a non-zero
exit, and no work done before the check (no model load, no run folder)."""

import json

import pytest

from pivotgym.cli import main


@pytest.fixture
def no_model(monkeypatch):
    """Make any model load fail loudly: a check that runs after the load would show up as this error."""
    from pivotgym.sampling import hf

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the ids were checked")

    monkeypatch.setattr(hf.HFSampler, "__init__", refuse)


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_eval_unknown_suite_fails_before_the_model_loads(no_model, capsys, tmp_path):
    assert main(["eval", "--suite", "no-such-suite", "--out", str(tmp_path / "r.json")]) == 1
    lines = _error_lines(capsys)
    assert len(lines) == 1, lines
    assert "unknown suite 'no-such-suite'" in lines[0] and "pivotgym suites" in lines[0]
    assert not list(tmp_path.iterdir())


def test_eval_unknown_member_fails_before_the_model_loads(no_model, capsys, tmp_path):
    from pivotgym.registry import get_registry

    suite = sorted(get_registry().suites)[0]
    assert main(["eval", "--suite", suite, "--member", "nope/none-v0", "--out", str(tmp_path / "r.json")]) == 1
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "'nope/none-v0'" in lines[0] and suite in lines[0], lines


def test_eval_suite_with_an_uninstalled_env_fails_before_the_model_loads(no_model, capsys, tmp_path):
    from pivotgym.registry import get_registry

    registry = get_registry()
    registry.suites.pop("test/broken", None)
    registry._register_suites("tests", "test/broken", {"nope/missing-v0": "ood"})
    try:
        assert main(["eval", "--suite", "test/broken", "--out", str(tmp_path / "r.json")]) == 1
    finally:
        registry.suites.pop("test/broken", None)
    lines = _error_lines(capsys)
    assert len(lines) == 1, lines
    assert "unknown env 'nope/missing-v0'" in lines[0] and "pivotgym envs" in lines[0] and "test/broken" in lines[0]


def test_profile_unknown_env_in_trajectories_fails_before_the_model_loads(no_model, capsys, tmp_path):
    trajs = tmp_path / "t.jsonl"
    row = {
        "id": "t0",
        "env_id": "nope/missing-v0",
        "task_id": "x",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    }
    trajs.write_text(json.dumps(row) + "\n")
    out = tmp_path / "p.jsonl"
    assert main(["profile", "-t", str(trajs), "-o", str(out)]) == 1
    lines = _error_lines(capsys)
    assert len(lines) == 1, lines
    assert str(trajs) in lines[0] and "unknown env 'nope/missing-v0'" in lines[0] and "pivotgym envs" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "field, yaml_text",
    [
        ("env", "name: typo\nenv: general/no-such-env-v0\n"),
        ("ood[1]", "name: typo\nenv: general/navigate-v0\nood: [general/navigate-v0, nope/missing-v0@test]\n"),
        ("suite", "name: typo\nenv: general/navigate-v0\nsuite: no-such-suite\n"),
    ],
)
def test_experiment_with_an_unknown_id_leaves_no_run_folder(field, yaml_text, no_model, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "exp.yaml"
    config.write_text(yaml_text)
    assert main(["experiment", str(config)]) == 1  # default run folder: runs/typo under the cwd
    lines = _error_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {config}: {field}: unknown ") and "Run `pivotgym " in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]


def test_run_experiment_checks_ids_before_writing(tmp_path):
    from pivotgym.experiment import ExperimentError, load_experiment, run_experiment

    config = tmp_path / "exp.yaml"
    config.write_text("name: typo\nenv: general/no-such-env-v0\n")
    with pytest.raises(ExperimentError, match="env: unknown env 'general/no-such-env-v0'"):
        run_experiment(load_experiment(config), out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


BROKEN_YAML = "name: x\nenv: [a, b\nfoo: 1\n"  # an unclosed flow list: the parser fails at line 3, column 4


def test_experiment_yaml_syntax_error_is_one_line_with_file_line_and_column(capsys, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(BROKEN_YAML)
    assert main(["experiment", str(config), "--out", str(tmp_path / "run")]) == 1
    lines = _error_lines(capsys)
    assert lines == [
        f"error: {config}:3:4: not valid YAML: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 2, column 6)"
    ]
    assert not (tmp_path / "run").exists()


def test_yaml_env_and_suite_syntax_errors_are_one_line(tmp_path):
    from pivotgym.declarative import ConfigError, read_yaml

    path = tmp_path / "suite.yaml"
    path.write_text("suite: s\nmembers: {a: in_domain\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value).startswith(f"{path}:3:1: not valid YAML: expected ',' or '}}'")
    assert "\n" not in str(info.value) and "<unicode string>" not in str(info.value)


def test_train_config_yaml_syntax_error_is_one_line(tmp_path):
    from pivotgym.train.config import ConfigError, load_config

    path = tmp_path / "sft.yaml"
    path.write_text("steps: 3\n  model: x\n")  # a bad indent
    with pytest.raises(ConfigError) as info:
        load_config(path, "sft")
    assert str(info.value) == f"{path}:2:8: not valid YAML: mapping values are not allowed here"


# ------------------------------------------------------------- mistyped or missing fields name the file and field
@pytest.mark.parametrize(
    "section, expected",
    [
        ("sft: {steps: many}", "sft.steps: expected an integer, got 'many'"),
        ("pivot: {adam_betas: 1}", "pivot.adam_betas: expected a list, got 1"),
        (
            "e2e: {learning_rate: 1e-5}",
            "e2e.learning_rate: expected a number, got '1e-5' (YAML reads a number like 1e-5 as text: write 1.0e-5)",
        ),
        ("train_tasks: lots", "train_tasks: expected an integer or null, got 'lots'"),
        ("ood: general/navigate-v0", "ood: expected a list, got 'general/navigate-v0'"),
    ],
)
def test_experiment_mistyped_value_names_file_and_field(section, expected, capsys, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(f"name: typo\nenv: general/navigate-v0\n{section}\n")
    assert main(["experiment", str(config), "--out", str(tmp_path / "run")]) == 1
    assert _error_lines(capsys) == [f"error: {config}:3: {expected}"]  # FILE:LINE of the field
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("steps: many\n", "steps: expected an integer, got 'many'"),
        ("adam_betas: 1\n", "adam_betas: expected a list, got 1"),
        ("adam_betas: [0.9]\n", "adam_betas: expected a list of 2 values, got [0.9]"),
        ("report_to: [jsonl, 3]\n", "report_to[1]: expected a string, got 3"),
        ("lora_target_modules: q_proj\n", "lora_target_modules: expected a list or null, got 'q_proj'"),
        ("lora: 'yes'\n", "lora: expected true or false, got 'yes'"),
    ],
)
def test_train_config_mistyped_value_names_file_and_field(text, expected, tmp_path):
    from pivotgym.train.config import ConfigError, load_config

    path = tmp_path / "sft.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, "sft")
    assert str(info.value) == f"{path}:1: {expected}"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("steps: many\n", "steps: expected an integer, got 'many'"),
        ("steps: 3\n  model: x\n", None),  # a YAML syntax error: FILE:LINE:COLUMN
    ],
)
@pytest.mark.parametrize("kind", ["sft", "pivot", "e2e"])
def test_train_command_error_is_one_line_naming_file_and_field(kind, text, expected, no_model, capsys, tmp_path):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text)
    assert main(["train", kind, "-c", str(path), "--output-dir", str(tmp_path / "run")]) == 1
    lines = _error_lines(capsys)
    if expected is None:
        assert lines == [f"error: {path}:2:8: not valid YAML: mapping values are not allowed here"]
    else:
        assert lines == [f"error: {path}:1: {expected}"]
    assert not (tmp_path / "run").exists()


def test_train_command_with_a_missing_config_is_one_line(no_model, capsys, tmp_path):
    path = tmp_path / "none.yaml"
    assert main(["train", "sft", "-c", str(path)]) == 1
    assert _error_lines(capsys) == [f"error: config file {path} does not exist (hint: check the path)"]


def test_train_config_accepts_ints_for_floats_and_null_for_optionals(tmp_path):
    from pivotgym.train.config import load_config

    path = tmp_path / "sft.yaml"
    path.write_text("learning_rate: 1\nmax_grad_norm: null\nadam_betas: [0.9, 1]\nlora_target_modules: [q_proj]\n")
    config = load_config(path, "sft")
    assert config.learning_rate == 1 and config.max_grad_norm is None and config.adam_betas == (0.9, 1)


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"id": "t0", "env_id": "general/navigate-v0", "messages": []}, "missing required field(s) task_id"),
        (
            {"id": "t0", "env_id": "general/navigate-v0", "task_id": "x", "messages": 5},
            "messages: expected a list, got 5",
        ),
        (
            {"id": "t0", "env_id": "general/navigate-v0", "task_id": "x", "messages": [], "reward": "high"},
            "reward: expected a number, got 'high'",
        ),
    ],
)
def test_trajectory_row_lacking_or_mistyping_a_field_names_file_line_and_field(
    row, expected, no_model, capsys, tmp_path
):
    good = {
        "id": "t1",
        "env_id": "general/navigate-v0",
        "task_id": "y",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "(A)"}],
    }
    trajs = tmp_path / "t.jsonl"
    trajs.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    assert main(["profile", "-t", str(trajs), "-o", str(tmp_path / "p.jsonl")]) == 1
    assert _error_lines(capsys) == [f"error: {trajs}:2: Trajectory row: {expected}"]


def test_profile_row_with_a_mistyped_field_names_file_line_and_field(tmp_path):
    from pivotgym.jsonl import JsonlError, read_profiles

    path = tmp_path / "profiles.jsonl"
    path.write_text(
        json.dumps(
            {
                "trajectory_id": "t",
                "turn": "first",
                "env_id": "e",
                "task_id": "x",
                "k": 2,
                "rewards": [1.0, 0.0],
                "mean": 0.5,
                "var": 0.25,
                "reasons": [],
                "reference": {},
                "verifier": {},
                "key": "k",
            }
        )
        + "\n"
    )
    with pytest.raises(
        JsonlError, match=r"profiles\.jsonl:1: TurnProfile row: turn: expected an integer, got 'first'$"
    ):
        read_profiles(path)


def test_eval_unknown_model_is_one_line_before_anything_loads(no_model, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("PIVOTGYM_ALLOW_DOWNLOADS", raising=False)
    out = tmp_path / "r.json"
    assert main(["eval", "--suite", "ood-quick", "--model", "nobody/no-such-model", "--out", str(out)]) == 1
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "'nobody/no-such-model' is not found locally" in lines[0], lines
    assert "pivotgym model pull nobody/no-such-model" in lines[0] and not out.exists()
