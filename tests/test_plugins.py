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
    with pytest.raises(RegistryError, match="unknown verifier 'nope'.*Run `pivotgym verifiers`"):
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
    r = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "plugins", "--json"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 1, r.stderr  # the broken test plugins are ERROR rows: the command fails after printing
    plugins = json.loads(r.stdout)
    by_name = {p["name"]: p for p in plugins}
    assert {"name", "version", "error"} <= set(by_name["arith"]) and by_name["arith"]["error"] is None
    assert by_name["broken-import"]["error"] and "Traceback" in by_name["broken-import"]["traceback"]
    envs = json.loads(
        subprocess.run(
            [sys.executable, "-m", "pivotgym.cli", "envs", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    arith = next(e for e in envs if e["id"] == "arith/chain-v0")
    assert arith["plugin"] == "arith" and arith["verifier"] == "arith/value" and arith["splits"] == ["train", "test"]


def test_a_third_party_plugin_cannot_hijack_a_first_party_env_id(all_test_plugins):
    """`hijack` loads before `planning` (entry points load in name order) and registers its ids first."""
    infos = _infos(all_test_plugins)
    assert all_test_plugins.env_spec("planning/blocks-v0").plugin == "planning"
    assert type(all_test_plugins.make("planning/blocks-v0")).__name__ == "PlanningEnv"
    assert all_test_plugins.verifiers["exact"].plugin == "builtins"
    assert infos["planning"].error is None and infos["builtins"].error is None
    err = infos["hijack"].error
    assert "duplicate env id 'planning/blocks-v0'" in err and "'planning'" in err and "'hijack'" in err
    assert "first-party" in err and "duplicate verifier id 'exact'" in err
    lost = {(c["id"], c["winner"], c["loser"]) for c in all_test_plugins.conflicts}
    assert {("planning/blocks-v0", "planning", "hijack"), ("exact", "builtins", "hijack")} <= lost
    # its own, non-conflicting ids still register
    assert all_test_plugins.verifiers["hijack/credit-applicable"].plugin == "hijack"


def _registry_of(*plugins):
    """A registry from (name, distribution, module) triples, registered in the given order (so pluggy calls
    the last one first)."""
    pm = PluginManager()
    for name, dist, module in plugins:
        pm.add(module, name, distribution=dist)
    return Registry.from_plugins(pm), pm


def _env_plugin(env_id, target):
    import types

    import pivotgym

    mod = types.ModuleType(f"plugin_{target}")
    mod.register_environments = pivotgym.hookimpl(lambda register: register(env_id, f"{target}:Env"))
    return mod


@pytest.mark.parametrize("first_party_first", [True, False])
def test_first_party_ids_win_in_either_load_order(first_party_first):
    genuine = ("planning", "pivotgym-planning", _env_plugin("planning/blocks-v0", "genuine"))
    hostile = ("evil", "evil-dist", _env_plugin("planning/blocks-v0", "evil"))
    registry, pm = _registry_of(*((genuine, hostile) if first_party_first else (hostile, genuine)))
    assert registry.env_spec("planning/blocks-v0").factory == "genuine:Env"
    assert pm.infos["planning"].error is None
    assert "'planning'" in pm.infos["evil"].error and "'evil'" in pm.infos["evil"].error
    assert registry.conflicts == [{"kind": "env", "id": "planning/blocks-v0", "winner": "planning", "loser": "evil"}]


def test_between_third_parties_the_one_called_first_keeps_the_id_and_the_later_is_named():
    # pluggy calls the most recently registered plugin first: here "a"
    registry, pm = _registry_of(
        ("b", "dist-b", _env_plugin("x/y-v0", "b")), ("a", "dist-a", _env_plugin("x/y-v0", "a"))
    )
    assert registry.env_spec("x/y-v0").factory == "a:Env"
    assert pm.infos["a"].error is None and "'a'" in pm.infos["b"].error and "lost" in pm.infos["b"].error
    # a distribution merely *named* like a first-party one only counts when it is exactly that name
    registry, pm = _registry_of(
        ("b", "pivotgym-planning-extras", _env_plugin("x/y-v0", "b")), ("a", "dist-a", _env_plugin("x/y-v0", "a"))
    )
    assert registry.env_spec("x/y-v0").factory == "a:Env"


def test_cli_plugins_shows_which_plugin_lost_an_id(plugin_site):
    env = cli_env(plugin_site)
    out = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "plugins", "--json"], env=env, capture_output=True, text=True
    ).stdout
    by_name = {p["name"]: p for p in json.loads(out)}
    assert {"kind": "env", "id": "planning/blocks-v0", "winner": "planning"} in by_name["hijack"]["lost_ids"]
    assert by_name["planning"]["lost_ids"] == [] and by_name["planning"]["error"] is None
    text = subprocess.run([sys.executable, "-m", "pivotgym.cli", "plugins"], env=env, capture_output=True, text=True)
    assert "planning/blocks-v0 (to planning)" in text.stdout and "lost it" in text.stderr


def test_cli_verifiers_lists_name_plugin_description_and_the_envs_using_each(plugin_site):
    env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    r = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "verifiers", "--json"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    by_name = {v["name"]: v for v in json.loads(r.stdout)}
    assert by_name["arith/value"] == {
        "name": "arith/value",
        "plugin": "arith",
        "description": "credits any expression of equal value",
        "envs": ["arith/chain-v0"],
    }
    assert "arith/chain-v0" in by_name["exact"]["envs"] and by_name["exact"]["plugin"] == "builtins"
    text = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "verifiers"], env=env, capture_output=True, text=True
    ).stdout
    row = next(line for line in text.splitlines() if line.startswith("arith/value "))
    assert row.split()[:3] == ["arith/value", "arith", "arith/chain-v0"]


def test_an_unknown_verifier_on_the_command_line_points_to_pivotgym_verifiers(plugin_site):
    env = cli_env(plugin_site, PIVOTGYM_LOAD_PLUGINS="arith")
    r = subprocess.run(
        [sys.executable, "-m", "pivotgym.cli", "check", "arith/chain-v0", "--verifier", "arith/valeu"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert "unknown verifier 'arith/valeu'" in r.stderr and "Did you mean arith/value" in r.stderr
    assert "pivotgym verifiers" in r.stderr


@pytest.mark.parametrize("kind, name", [("samplers", "hf"), ("sandboxes", "bwrap")])
def test_cli_lists_samplers_and_sandboxes_and_an_unknown_one_points_there(kind, name, capsys):
    from pivotgym.cli import main
    from pivotgym.registry import get_registry

    assert main([kind, "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[name]["plugin"] == "builtins" and rows[name]["description"]
    assert main([kind]) == 0
    assert any(line.split()[:2] == [name, "builtins"] for line in capsys.readouterr().out.splitlines())
    make = get_registry().make_sampler if kind == "samplers" else get_registry().make_sandbox
    what = {"samplers": "sampler", "sandboxes": "sandbox"}[kind]
    with pytest.raises(RegistryError, match=f"unknown {what} 'nope'.*Run `pivotgym {kind}`"):
        make("nope")


def test_entry_point_hooks_are_called_in_name_order_then_the_builtins(plugin_site, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.delenv("PIVOTGYM_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pm = PluginManager()
    pm.load_builtins()
    pm.load_entry_points()
    called = pm.call_each("register_verifiers", lambda owner: {"register": lambda *args, **kwargs: None})
    assert called[-1] == "builtins" and called[:-1] == sorted(called[:-1])
    assert {"arith", "hijack", "broken-hook"} <= set(called)
    assert list(pm.infos)[0] == "builtins" and list(pm.infos)[1:] == sorted(list(pm.infos)[1:])  # listing order


def test_a_plugin_imported_before_pivotgym_still_registers_its_envs():
    """Importing a plugin's hook module first makes it import pivotgym, which builds the registry while that
    module is half imported (no hooks yet); the registry is then built again, so nothing vanishes silently."""
    import subprocess
    import sys

    code = (
        "import pivotgym_planning.plugin, pivotgym\n"
        "envs = [k for k in pivotgym.get_registry().envs if k.startswith('planning/')]\n"
        "print(len(envs), pivotgym.get_registry() is pivotgym.get_registry())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    count, cached = out.stdout.split()
    assert int(count) >= 2 and cached == "True"
