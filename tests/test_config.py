"""The one config loader (pivotgym.config): YAML into checked dataclasses, errors with FILE:LINE."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pivotgym.config import (
    CHOICES,
    INTERNAL,
    Source,
    build,
    check_field_choices,
    check_section,
    choices,
    config_fields,
    did_you_mean,
    read_yaml,
)
from pivotgym.errors import ConfigError, PivotgymError


@dataclass
class Select:
    max_mean: float = 0.6
    min_var: float = 0.0


@dataclass
class Experiment:
    name: str
    steps: int = 1
    select: Select = field(default_factory=Select)
    tags: list[str] = field(default_factory=list)
    path: Path | None = field(default=None, metadata={INTERNAL: True})

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"steps must be >= 0, got {self.steps}")


def _load(tmp_path: Path, text: str) -> tuple[Path, Experiment]:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    data, source = read_yaml(path)
    return path, build(Experiment, data, source)


def test_a_good_file_builds_nested_sections(tmp_path):
    _, config = _load(tmp_path, "name: x\nsteps: 3\nselect: {max_mean: 0.3}\n")
    assert config == Experiment(name="x", steps=3, select=Select(max_mean=0.3))


def test_an_unknown_nested_key_names_file_line_and_the_nearest_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "name: x\nselect:\n  min_var: 0\n  max_maen: 0.5\n")
    assert str(info.value) == f"{tmp_path / 'exp.yaml'}:4: select.max_maen: unknown key (did you mean 'max_mean'?)"
    assert info.value.hint == "known keys of select: max_mean, min_var"
    assert isinstance(info.value, PivotgymError) and isinstance(info.value, ValueError)


def test_an_unknown_key_with_nothing_close_lists_the_known_keys_in_the_hint(tmp_path):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "name: x\nzzz: 1\n")
    assert str(info.value).endswith("exp.yaml:2: zzz: unknown key")
    assert info.value.hint == "known keys: name, select, steps, tags"


def test_an_internal_field_cannot_be_set_from_a_file(tmp_path):
    with pytest.raises(ConfigError, match="path: unknown key"):
        _load(tmp_path, "name: x\npath: /etc\n")


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nsteps: ten\n", ":2: steps: expected an integer, got 'ten'"),
        ("name: x\ntags: [a, 3]\n", ":2: tags[1]: expected a string, got 3"),
        ("name: x\nselect: 0.5\n", ":2: select: expected Select, got 0.5"),
        ("steps: 2\n", ": name: required field is missing"),
        ("name: x\nsteps: -1\n", ": steps must be >= 0, got -1"),
    ],
)
def test_wrong_values_name_the_field(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert str(info.value) == f"{tmp_path / 'exp.yaml'}{message}"


def test_syntax_errors_and_missing_files_are_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps: 3\n  model: x\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value) == f"{path}:2:8: not valid YAML: mapping values are not allowed here"
    with pytest.raises(ConfigError, match="config file .*none.yaml does not exist"):
        read_yaml(tmp_path / "none.yaml")


def test_a_partial_section_is_checked_without_being_built():
    assert check_section(Select, {"min_var": 0}) == {"min_var": 0}
    with pytest.raises(ConfigError, match=r"^sft\.max_mea: unknown key \(did you mean 'max_mean'\?\)$"):
        check_section(Select, {"max_mea": 1}, Source(), ("sft",))


def test_did_you_mean_only_suggests_close_names():
    assert did_you_mean("group_sise", ["group_size", "steps"]) == " (did you mean 'group_size'?)"
    assert did_you_mean("kk", ["k", "temperature"]) == " (did you mean 'k'?)"
    assert did_you_mean("zzz", ["k", "temperature"]) == ""


@dataclass
class Runner:
    executor: str = field(
        default="process", metadata=choices(("process", "serial", "ray"), key=lambda s: s.split(":")[0])
    )
    sinks: list[str] = field(default_factory=list, metadata=choices(("jsonl", "tensorboard")))


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "executor: proces\n",
            ":1: executor: must be one of process, serial, ray, got 'proces' (did you mean 'process'?)",
        ),
        (
            "executor: 'rya:host:1'\n",
            ":1: executor: must be one of process, serial, ray, got 'rya:host:1' (did you mean 'ray'?)",
        ),
        (
            "sinks: [jsonl, tensorbord]\n",
            ":1: sinks.1: must be one of jsonl, tensorboard, got 'tensorbord' (did you mean",
        ),
    ],
)
def test_a_value_outside_its_choices_names_the_line_the_item_and_the_nearest_choice(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    data, source = read_yaml(path)
    with pytest.raises(ConfigError) as info:
        build(Runner, data, source)
    assert str(info.value).startswith(f"{path}{message}"), info.value


def test_choices_take_what_they_allow_and_bind_configs_built_in_code(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("executor: 'ray:10.0.0.1:6379'\nsinks: [jsonl, tensorboard]\n")
    data, source = read_yaml(path)
    assert build(Runner, data, source).executor == "ray:10.0.0.1:6379"
    check_field_choices(Runner())
    with pytest.raises(ConfigError, match=r"^sinks.0: must be one of jsonl, tensorboard, got 'csv'$"):
        check_field_choices(Runner(sinks=["csv"]))


#: fields of pivotgym's config files that hold text a closed set of choices cannot describe, and why
FREE_TEXT = {
    "model": "a model alias, a folder or a Hugging Face id",
    "output_dir": "a path",
    "resume": "auto, never or a checkpoint path",
    "sampler": "a registered sampler (plugins add samplers; checked against the registry before the run)",
    "verifier": "a registered verifier (plugins add verifiers)",
    "lora_target_modules": "module names of the model",
    "trajectories": "a path",
    "pivots": "a path",
    "profiles": "a path",
    "env_id": "an env id (registry)",
    "env": "an env id (registry)",
    "split": "a split the env defines",
    "eval_split": "a split the env defines",
    "name": "a run name",
    "ood": "env ids (registry)",
    "suite": "a suite id (registry)",
    "primary": "a comparison key, parsed by parse_comparison",
    "description": "prose",
    "id": "an env or suite id",
    "base": "an env id",
    "task": "a BIG-bench task name",
    "path": "a path",
    "template": "a prompt template",
    "system": "a system prompt",
    "delimiter": "text",
    "pattern": "a regex",
    "metric": "a metric label (the YAML env's) or a curve metric (choices)",
    "hidden_tools": "tool names of the MCP server",
    "session_argument": "an argument name of the MCP server's tools",
    "command": "a command line",
    "cwd": "a path",
    "url": "a URL",
}


def _config_classes() -> list[type]:
    import dataclasses
    import typing

    from pivotgym import declarative
    from pivotgym.experiment.config import ExperimentConfig
    from pivotgym.mcp import config as mcp_config
    from pivotgym.train.config import CONFIGS

    found: list[type] = []
    todo = [*CONFIGS.values(), ExperimentConfig, declarative._EnvFile, declarative._SuiteFile]
    todo += [declarative._VariantFile, mcp_config._McpFile]
    while todo:
        cls = todo.pop()
        if cls in found:
            continue
        found.append(cls)
        for tp in typing.get_type_hints(cls).values():
            todo += [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a) and isinstance(a, type)]
    return found


def test_every_text_field_of_every_config_file_declares_its_choices_or_why_it_has_none():
    """A new enum-like field without ``choices`` metadata would take any typo silently (``executor: proces``
    failed only inside the first stage): this walk over every config dataclass fails until it declares them."""
    import typing

    undeclared = []
    for cls in _config_classes():
        hints = typing.get_type_hints(cls)
        for f in config_fields(cls):
            text = {str, list[str], str | None, list[str] | None}
            if hints[f.name] in text and CHOICES not in f.metadata and f.name not in FREE_TEXT:
                undeclared.append(f"{cls.__name__}.{f.name}")
    assert not undeclared, f"give these choices(...) metadata or a FREE_TEXT reason: {undeclared}"
    assert len(_config_classes()) >= 12  # the walk reached the sections
