"""Errors that used to mislead (issue 20): each names the thing that is wrong and the fix."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest
from core_helpers import cli_env

import pivotgym
from pivotgym.cli import main
from pivotgym.plugins import PluginManager
from pivotgym.registry import Registry, RegistryError


def _error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _plugin(hook: str, body: Any) -> types.ModuleType:
    mod = types.ModuleType(f"plugin_{hook}")
    setattr(mod, hook, pivotgym.hookimpl(body))
    return mod


# -------------------------------------------------------------------- a plugin that failed to load
def test_an_env_of_a_plugin_that_failed_to_import_names_that_plugin_not_unknown_env():
    pm = PluginManager()
    pm.load_module("pivotgym_lights_not_installed_anywhere", name="lights")  # its import fails
    registry = Registry.from_plugins(pm)
    with pytest.raises(RegistryError) as info:
        registry.make("lights/out-v0")
    message = str(info.value)
    assert message.startswith("unknown env 'lights/out-v0': plugin 'lights', which provides it, could not register")
    assert "import failed: ModuleNotFoundError" in message
    assert "`pivotgym plugins` shows its traceback" in message


def test_a_raising_register_hook_is_named_when_no_env_matches():
    def broken(register: Any) -> None:
        raise ValueError("bad enum value in envs/x.yaml")

    pm = PluginManager()
    pm.add(_plugin("register_environments", broken), "yaml-envs")
    pm.add(_plugin("register_environments", lambda register: register("other/env-v0", "x:Env")), "other")
    registry = Registry.from_plugins(pm)
    with pytest.raises(RegistryError) as info:
        registry.make("general/navigate-v0")
    message = str(info.value)
    assert message.startswith("unknown env 'general/navigate-v0'.")
    assert (
        "could not register all their ids and may provide it: 'yaml-envs': register_environments raised "
        "ValueError('bad enum value in envs/x.yaml')"
        in message
        and "pivotgym plugins" in message
    )
    # a close match is the likelier explanation: then only the match is offered
    with pytest.raises(RegistryError) as info:
        registry.make("other/env-v1")
    assert "Did you mean other/env-v0" in str(info.value) and "yaml-envs" not in str(info.value)


def test_a_plugin_whose_other_hooks_raised_is_not_blamed_for_a_missing_env():
    def broken(register: Any) -> None:
        raise ValueError("verifier hook bug")

    pm = PluginManager()
    pm.add(_plugin("register_verifiers", broken), "lights")
    registry = Registry.from_plugins(pm)
    with pytest.raises(RegistryError) as info:
        registry.make("lights/out-v0")
    assert "plugin" not in str(info.value)
    with pytest.raises(RegistryError, match="unknown verifier 'lights/value': plugin 'lights'"):
        registry.make_verifier("lights/value")


def test_cli_check_of_an_env_whose_plugin_failed_to_import(plugin_site):
    """`broken-import` (distribution pivotgym-broken) fails at import; an id in its namespace names it."""
    r = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "check", "broken/lights-v0"],
        capture_output=True,
        text=True,
        env=cli_env(plugin_site),
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: unknown env 'broken/lights-v0': plugin 'broken-import', which provides it")
    assert "ModuleNotFoundError" in lines[0] and "pivotgym plugins" in lines[0]


# -------------------------------------------------------------------- a factory path that names nothing
@pytest.mark.parametrize("factory", ["pivotgym.registry:NoSuchEnv", "pivotgym_no_such_module.env:Env", "no-colon"])
def test_a_bad_env_factory_path_names_the_env_and_its_plugin(factory):
    pm = PluginManager()
    pm.add(_plugin("register_environments", lambda register: register("lights/out-v0", factory)), "lights")
    registry = Registry.from_plugins(pm)
    with pytest.raises(RegistryError) as info:
        registry.make("lights/out-v0")
    message = str(info.value)
    assert message.startswith(f"env 'lights/out-v0' of plugin 'lights': cannot load its factory {factory!r}")
    assert "package.module:Name" in message


def test_a_bad_verifier_factory_path_names_the_verifier_and_its_plugin():
    pm = PluginManager()
    pm.add(_plugin("register_verifiers", lambda register: register("lights/v", "pivotgym.registry:Nope")), "lights")
    with pytest.raises(RegistryError, match="verifier 'lights/v' of plugin 'lights': cannot load its factory"):
        Registry.from_plugins(pm).make_verifier("lights/v")


# -------------------------------------------------------------------- --model with a folder that is not there
@pytest.fixture
def offline(monkeypatch, tmp_path):
    import huggingface_hub.constants

    from pivotgym.sampling import models

    monkeypatch.delenv(models.ALLOW_DOWNLOADS_ENV, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def test_a_missing_run_folder_is_called_a_missing_folder_not_a_model_to_pull(offline, tmp_path, monkeypatch):
    from pivotgym.sampling.models import ModelError, resolve_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "quickstart").mkdir(parents=True)
    with pytest.raises(ModelError) as info:
        resolve_model("runs/quickstrat")
    message = str(info.value)
    assert message.startswith("model folder 'runs/quickstrat' does not exist: runs holds no folder 'quickstrat'")
    assert "did you mean runs/quickstart" in message and "not found locally" not in message
    with pytest.raises(ModelError, match=r"model folder './gone/final' does not exist: gone does not exist"):
        resolve_model("./gone/final")
    # an owner/name whose owner is no local folder is still a hub id to pull
    with pytest.raises(ModelError, match="is not found locally.*pivotgym model pull nobody/model"):
        resolve_model("nobody/model")


def test_eval_with_a_missing_run_folder_is_one_line(offline, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert main(["eval", "--suite", "ood-quick", "--model", "runs/nonexistent", "--out", "r.json"]) == 1
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "model folder 'runs/nonexistent' does not exist" in lines[0], lines


# -------------------------------------------------------------------- train: inputs checked before the model
@pytest.fixture
def no_trainer(monkeypatch):
    """Building a trainer (which loads the model) fails loudly: a check after it would show up as this."""
    import pivotgym.train

    def refuse(kind: str) -> Any:
        raise AssertionError("the trainer (and its model) was built before the inputs were checked")

    monkeypatch.setattr(pivotgym.train, "trainer_class", refuse)


@pytest.mark.parametrize(
    "kind, text, field",
    [
        ("pivot", "pivots: {missing}\ntrajectories: {present}\n", "pivots"),
        ("pivot", "pivots: {present}\ntrajectories: {missing}\n", "trajectories"),
        ("sft", "steps: 2\ntrajectories: {missing}\n", "trajectories"),
        ("sft", "trajectories: {present}\npivots: {missing}\n", "pivots"),
    ],
)
def test_train_with_a_missing_data_file_names_the_field_before_any_model_loads(
    kind, text, field, no_trainer, capsys, tmp_path
):
    present = tmp_path / "present.jsonl"
    present.write_text("")
    missing = tmp_path / "missing.jsonl"
    config = tmp_path / "cfg.yaml"
    config.write_text(text.format(present=present, missing=missing))
    line = text.splitlines().index(next(x for x in text.splitlines() if x.startswith(field))) + 1
    assert main(["train", kind, "-c", str(config), "--output-dir", str(tmp_path / "run")]) == 1
    assert _error_lines(capsys) == [
        f"error: {config}:{line}: {field}: {missing} does not exist (hint: check the "
        f"path; `pivotgym {'select' if field == 'pivots' else 'expert'}` writes this "
        f"file)"
    ]
    assert not (tmp_path / "run").exists()


def test_train_e2e_with_an_unknown_env_names_the_field_before_any_model_loads(no_trainer, capsys, tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("steps: 1\nenv_id: general/navigaet-v0\n")
    assert main(["train", "e2e", "-c", str(config)]) == 1
    lines = _error_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {config}:2: env_id: unknown env 'general/navigaet-v0'")
    assert "Did you mean general/navigate-v0" in lines[0]


# -------------------------------------------------------------------- hints come from the error itself
def test_hint_for_uses_the_hint_an_error_carries():
    from pivotgym.cli.output import CLIError, error_line, hint_for
    from pivotgym.errors import ConfigError, RegistryError

    assert hint_for(ConfigError("x.yaml:3: steps: bad", hint="write a number")) == "write a number"
    assert hint_for(RegistryError("unknown env 'a/b-v0'. Run `pivotgym envs`")) is None
    assert hint_for(CLIError("no candidate", hint="pass --candidate")) == "pass --candidate"
    assert hint_for(FileNotFoundError("nope")) == "check the path"
    assert hint_for(RuntimeError("boom")) == "run again with --debug for the traceback"
    assert error_line(ConfigError("bad\nvalue", hint="fix it")) == "error: bad value (hint: fix it)"


def test_a_yaml_env_file_that_fails_its_check_is_named_when_its_env_is_asked_for(tmp_path, monkeypatch):
    """The builtins plugin registers every good YAML file and then reports the bad ones; the bad file's env
    id is then explained by that report (file and line), not called unknown."""
    from pivotgym.registry import get_registry, reset_registry

    (tmp_path / "thing.yaml").write_text(
        "id: mine/thing-v0\nsource: {type: inline}\nprompt: {template: '{input}'}\nanswer: {type: numbr}\n"
    )
    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(tmp_path))
    monkeypatch.setenv("PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_registry()
    try:
        registry = get_registry()
        assert "general/navigate-v0" in registry.envs  # the good files still load
        with pytest.raises(RegistryError) as info:
            registry.make("mine/thing-v0")
    finally:
        reset_registry()
    message = str(info.value)
    assert "'builtins': register_environments raised" in message and str(tmp_path / "thing.yaml") in message


def test_a_missing_run_folder_without_a_runs_folder_is_not_answered_with_a_download_only(tmp_path, monkeypatch):
    """`runs/typo` with no `runs/` beside it could be a hub id too: the error says first that no such folder
    exists (and where it looked), then how to pull it if a hub id was meant."""
    from pivotgym.sampling.models import ModelError, resolve_model

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as info:
        resolve_model("runs/nonexistent")
    message = str(info.value)
    assert f"there is no folder {tmp_path / 'runs' / 'nonexistent'}" in message
    assert message.index("check the path") < message.index("pivotgym model pull runs/nonexistent")
