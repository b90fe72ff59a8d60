import json
import subprocess
import sys

import gymnasium as gym
import pytest

from core_helpers import cli_env
from pivotgym.plugins import PluginManager
from pivotgym.registry import Registry, RegistryError


def _infos(registry):
    return {i.name: i for i in registry.plugins.infos.values()}


def test_third_party_plugin_registers_env_verifier_and_suite_by_pip_install_alone(arith_registry):
    infos = _infos(arith_registry)
    assert infos["arith"].version == "0.3.0" and infos["arith"].error is None
    assert infos["arith"].distribution == "pivotgym-arith"
    spec = arith_registry.env_spec("arith/chain-v0")
    assert spec.plugin == "arith" and spec.verifier == "arith/value" and spec.resolved_splits() == ("train", "test")
    assert arith_registry.suite("arith-smoke").members == {"arith/chain-v0": "in_domain"}
    env = arith_registry.make("arith/chain-v0")
    assert env.env_id == "arith/chain-v0" and env.default_verifier == "arith/value"


def test_gymnasium_make_reaches_plugin_envs(arith_registry):
    env = gym.make("pivotgym:arith/chain-v0")
    obs, info = env.reset(seed=1)
    assert obs[-1]["role"] == "user" and info["task_id"].startswith("train-")
    _obs, reward, _term, _trunc, step_info = env.step("not a number ((")
    assert reward == 0 and "error" in step_info


def test_broken_plugins_are_reported_while_the_rest_loads(all_test_plugins):
    infos = _infos(all_test_plugins)
    assert "ModuleNotFoundError" in infos["broken-import"].error
    assert "broken on purpose" in infos["broken-hook"].error
    # a hook that raised still keeps what it registered before failing; the others are untouched
    assert "broken/ok-before-crash" in all_test_plugins.verifiers
    assert "arith/chain-v0" in all_test_plugins.envs and infos["arith"].error is None


def test_duplicate_ids_are_an_error_naming_both_owners(all_test_plugins):
    err = _infos(all_test_plugins)["duplicate"].error
    assert "duplicate env id 'arith/chain-v0'" in err and "'arith'" in err and "'duplicate'" in err
    assert all_test_plugins.env_spec("arith/chain-v0").plugin == "arith"


def test_disable_autoload_keeps_only_builtins(plugin_site, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.setenv("PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm = PluginManager()
    pm.load_builtins()
    pm.load_entry_points()
    registry = Registry.from_plugins(pm)
    assert list(pm.infos) == ["builtins"] and "exact" in registry.verifiers
    assert "arith/chain-v0" not in registry.envs
    assert {spec.plugin for spec in registry.envs.values()} <= {"builtins"}


def test_load_only_names_missing_plugins(plugin_site, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.setenv("PIVOTGYM_LOAD_PLUGINS", "arith,not-installed")
    pm = PluginManager()
    pm.load_entry_points()
    assert "arith" in pm.infos and "broken-hook" not in pm.infos
    assert "not installed" in pm.infos["not-installed"].error


def test_unknown_ids_suggest_close_matches(arith_registry):
    with pytest.raises(RegistryError, match="Did you mean arith/chain-v0"):
        arith_registry.make("arith/chian-v0")
    with pytest.raises(RegistryError, match="pivotgym plugins"):
        arith_registry.make_verifier("nope")


def test_invalid_env_ids_are_rejected_in_the_owning_plugin():
    import types

    import pivotgym

    mod = types.ModuleType("badids")
    mod.register_environments = pivotgym.hookimpl(lambda register: register("no-namespace", "x:y"))
    pm = PluginManager()
    pm.add(mod, "badids")
    Registry.from_plugins(pm)
    assert "domain/name-v0" in pm.infos["badids"].error


def test_cli_lists_plugins_and_envs_as_json(plugin_site):
    env = cli_env(plugin_site)
    plugins = json.loads(subprocess.run([sys.executable, "-m", "pivotgym.cli", "plugins", "--json"], env=env,
                                        capture_output=True, text=True, check=True).stdout)
    by_name = {p["name"]: p for p in plugins}
    assert {"name", "version", "error"} <= set(by_name["arith"]) and by_name["arith"]["error"] is None
    assert by_name["broken-import"]["error"] and "Traceback" in by_name["broken-import"]["traceback"]
    envs = json.loads(subprocess.run([sys.executable, "-m", "pivotgym.cli", "envs", "--json"], env=env,
                                     capture_output=True, text=True, check=True).stdout)
    arith = next(e for e in envs if e["id"] == "arith/chain-v0")
    assert arith["plugin"] == "arith" and arith["verifier"] == "arith/value" and arith["splits"] == ["train", "test"]
