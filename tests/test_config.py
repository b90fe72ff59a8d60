"""The one config loader (pivotgym.config): YAML into checked dataclasses, errors with FILE:LINE."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pivotgym.config import INTERNAL, Source, build, check_section, did_you_mean, read_yaml
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
