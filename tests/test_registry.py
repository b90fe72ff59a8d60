"""Hook call order (pluggy's own), wrappers, and duplicate ids of every kind (issue 20)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

import pivotgym
from pivotgym.plugins import PluginManager
from pivotgym.registry import Registry, RegistryError

#: per kind: the arguments after the id that ``register`` takes, and the table the registry keeps them in
KIND_ARGS: dict[str, tuple[Callable[[str], tuple[Any, ...]], str]] = {
    "environments": (lambda owner: (f"{owner}:Env",), "envs"),
    "verifiers": (lambda owner: (f"{owner}:Verifier",), "verifiers"),
    "suites": (lambda owner: ({f"{owner}/env-v0": "in_domain"},), "suites"),
    "samplers": (lambda owner: (f"{owner}:Sampler",), "samplers"),
    "sandboxes": (lambda owner: (f"{owner}:Sandbox",), "sandboxes"),
}
KIND_WORD = {
    "environments": "env",
    "verifiers": "verifier",
    "suites": "suite",
    "samplers": "sampler",
    "sandboxes": "sandbox",
}
IDS = {
    "environments": "x/shared-v0",
    "verifiers": "x/shared",
    "suites": "x-shared",
    "samplers": "x-shared",
    "sandboxes": "x-shared",
}


def _plugin(owner: str, kind: str, *ids: str, **marks: bool) -> types.ModuleType:
    """A plugin module whose ``register_<kind>`` registers ``ids`` (hookimpl options in ``marks``)."""
    args, _ = KIND_ARGS[kind]
    mod = types.ModuleType(f"plugin_{owner}")

    def hook(register: Any) -> None:
        for id_ in ids:
            register(id_, *args(owner))

    setattr(mod, f"register_{kind}", pivotgym.hookimpl(**marks)(hook))
    return mod


def _manager(*plugins: tuple[str, str | None, types.ModuleType]) -> PluginManager:
    """Plugins ``(name, distribution, module)`` registered in the given order."""
    pm = PluginManager()
    for name, dist, module in plugins:
        pm.add(module, name, distribution=dist)
    return pm


def _owner(registry: Registry, kind: str, key: str) -> str:
    table = getattr(registry, KIND_ARGS[kind][1])
    return table[key].plugin


# ------------------------------------------------------------------------------------------ call order
def test_hooks_are_called_in_exactly_pluggys_order():
    """``call_each`` calls plugins in the order pluggy's own hook call does: tryfirst, then the most recently
    registered first, trylast last."""
    pm = _manager(
        ("plain1", None, _plugin("plain1", "samplers", "plain1")),
        ("last", None, _plugin("last", "samplers", "last", trylast=True)),
        ("first", None, _plugin("first", "samplers", "first", tryfirst=True)),
        ("plain2", None, _plugin("plain2", "samplers", "plain2")),
    )
    pluggy_order: list[str] = []
    pm.hook.register_samplers(register=lambda name, factory: pluggy_order.append(name))
    assert pluggy_order == ["first", "plain2", "plain1", "last"]
    ours: list[str] = []
    called = pm.call_each("register_samplers", lambda owner: {"register": lambda name, factory: ours.append(owner)})
    assert called == ours == pluggy_order


def test_a_trylast_plugin_loses_an_id_to_a_plain_one_registered_before_it():
    pm = _manager(
        ("plain", "dist-plain", _plugin("plain", "environments", "x/y-v0")),
        ("late", "dist-late", _plugin("late", "environments", "x/y-v0", trylast=True)),
    )
    registry = Registry.from_plugins(pm)
    assert registry.env_spec("x/y-v0").plugin == "plain"
    assert pm.infos["plain"].error is None and "'late' lost it" in pm.infos["late"].error


def test_a_tryfirst_plugin_wins_an_id_over_a_plain_one_registered_after_it():
    pm = _manager(
        ("early", "dist-early", _plugin("early", "environments", "x/y-v0", tryfirst=True)),
        ("plain", "dist-plain", _plugin("plain", "environments", "x/y-v0")),
    )
    registry = Registry.from_plugins(pm)
    assert registry.env_spec("x/y-v0").plugin == "early" and "'plain' lost it" in pm.infos["plain"].error


@pytest.mark.parametrize("style", ["wrapper", "hookwrapper"])
def test_a_wrapper_wraps_each_plugins_call_and_is_never_called_as_a_registrant(style):
    seen: list[str] = []
    mod = types.ModuleType("wrapping")
    if style == "wrapper":

        def register_environments(register: Any) -> Any:
            seen.append("before")
            result = yield
            seen.append("after")
            return result
    else:

        def register_environments(register: Any) -> Any:  # old-style: receives the outcome
            seen.append("before")
            outcome = yield
            outcome.get_result()
            seen.append("after")

    mod.register_environments = pivotgym.hookimpl(**{style: True})(register_environments)
    pm = _manager(
        ("a", None, _plugin("a", "environments", "a/env-v0")),
        ("wrapping", None, mod),
        ("b", None, _plugin("b", "environments", "b/env-v0")),
    )
    registry = Registry.from_plugins(pm)
    assert set(registry.envs) == {"a/env-v0", "b/env-v0"}
    assert seen == ["before", "after", "before", "after"]  # once around each plugin's hook
    assert all(info.error is None for info in pm.infos.values())


def test_an_error_is_recorded_on_the_plugin_that_raised_it_and_the_others_still_load():
    def broken_wrapper(register: Any) -> Any:
        yield
        raise RuntimeError("wrapper bug")

    wrapping = types.ModuleType("wrapping")
    wrapping.register_verifiers = pivotgym.hookimpl(wrapper=True)(broken_wrapper)
    raising = types.ModuleType("raising")

    def hook(register: Any) -> None:
        register("raising/ok", "x:V")
        raise ValueError("hook bug")

    raising.register_verifiers = pivotgym.hookimpl(hook)
    pm = _manager(("good", None, _plugin("good", "verifiers", "good/v")), ("raising", None, raising))
    registry = Registry.from_plugins(pm)
    assert {"good/v", "raising/ok"} <= set(registry.verifiers)
    assert "hook bug" in pm.infos["raising"].error and pm.infos["good"].error is None

    pm = _manager(
        ("good", None, _plugin("good", "verifiers", "good/v")), ("wrapping", None, wrapping), ("raising", None, raising)
    )
    Registry.from_plugins(pm)
    assert "wrapper bug" in pm.infos["wrapping"].error  # its own exception, once per call it wrapped
    assert "hook bug" in pm.infos["raising"].error and "wrapper bug" not in (pm.infos["raising"].error or "")
    assert pm.infos["good"].error is None


# ------------------------------------------------------------------------------------------ duplicate ids
@pytest.mark.parametrize("kind", sorted(KIND_ARGS))
def test_between_third_parties_the_plugin_called_later_loses_and_both_are_named(kind):
    key = IDS[kind]
    pm = _manager(
        ("later", "dist-later", _plugin("later", kind, key)), ("sooner", "dist-sooner", _plugin("sooner", kind, key))
    )  # registered last: called first
    registry = Registry.from_plugins(pm)
    assert _owner(registry, kind, key) == "sooner" and pm.infos["sooner"].error is None
    err = pm.infos["later"].error
    assert f"duplicate {KIND_WORD[kind]} id {key!r}" in err and "'sooner'" in err and "'later'" in err
    assert registry.conflicts == [{"kind": KIND_WORD[kind], "id": key, "winner": "sooner", "loser": "later"}]


@pytest.mark.parametrize("kind", sorted(KIND_ARGS))
def test_a_third_party_called_first_cannot_take_a_first_party_id(kind):
    key = IDS[kind]
    pm = _manager(
        ("genuine", "pivotgym-planning", _plugin("genuine", kind, key)),
        ("hostile", "hostile-dist", _plugin("hostile", kind, key, tryfirst=True)),
    )
    registry = Registry.from_plugins(pm)
    assert _owner(registry, kind, key) == "genuine" and pm.infos["genuine"].error is None
    err = pm.infos["hostile"].error
    assert "'genuine'" in err and "'hostile'" in err and "first-party" in err
    assert registry.conflicts == [{"kind": KIND_WORD[kind], "id": key, "winner": "genuine", "loser": "hostile"}]


def test_an_env_never_runs_with_the_verifier_of_the_plugin_that_took_its_verifier_id():
    """`thief` is called first and takes `arith/value`; `arith`'s env must not be judged by the thief's verifier."""
    arith = types.ModuleType("arith")
    arith.register_environments = pivotgym.hookimpl(
        lambda register: register("arith/chain-v0", "arith:Env", verifier="arith/value")
    )
    arith.register_verifiers = pivotgym.hookimpl(lambda register: register("arith/value", "arith:Value"))
    thief = _plugin("thief", "verifiers", "arith/value", tryfirst=True)
    pm = _manager(("arith", "pivotgym-arith", arith), ("thief", "thief-dist", thief))
    registry = Registry.from_plugins(pm)
    assert registry.verifiers["arith/value"].plugin == "thief"
    err = pm.infos["arith"].error
    assert "env 'arith/chain-v0'" in err and "verifier 'arith/value'" in err and "'thief'" in err
    for use in (lambda: registry.verifier_name_for("arith/chain-v0"), lambda: registry.make("arith/chain-v0")):
        with pytest.raises(RegistryError, match="plugin 'thief' owns that id"):
            use()
    assert registry.env_spec("arith/chain-v0").to_dict()["error"]


def test_an_env_may_use_a_verifier_that_another_plugin_registered_alone():
    user = types.ModuleType("user")
    user.register_environments = pivotgym.hookimpl(
        lambda register: register("user/env-v0", "user:Env", verifier="shared/v")
    )
    pm = _manager(("user", None, user), ("lib", None, _plugin("lib", "verifiers", "shared/v")))
    registry = Registry.from_plugins(pm)
    assert registry.verifier_name_for("user/env-v0") == "shared/v" and pm.infos["user"].error is None


def test_envs_shows_an_env_disabled_for_a_lost_verifier_id(capsys):
    import json

    from pivotgym.cli import main
    from pivotgym.registry import reset_registry

    arith = types.ModuleType("arith")
    arith.register_environments = pivotgym.hookimpl(
        lambda register: register("arith/chain-v0", "arith:Env", verifier="arith/value")
    )
    arith.register_verifiers = pivotgym.hookimpl(lambda register: register("arith/value", "arith:Value"))
    pm = _manager(
        ("arith", "pivotgym-arith", arith),
        ("thief", "thief-dist", _plugin("thief", "verifiers", "arith/value", tryfirst=True)),
    )
    reset_registry(Registry.from_plugins(pm))
    try:
        assert main(["envs"]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("arith/chain-v0"))
        assert "arith/value (DISABLED: see `pivotgym plugins`)" in row
        assert main(["envs", "--json"]) == 0
        assert "plugin 'thief' owns that id" in json.loads(capsys.readouterr().out)[0]["error"]
    finally:
        reset_registry()


def test_user_code_registers_an_env_and_its_verifier_like_gymnasium_register():
    """A notebook's env: ``pivotgym.make``, ``gymnasium.make``, ``check_env`` and the judge find it; running the
    cell again replaces it; a plugin's id is refused."""
    import gymnasium
    from core_helpers import CounterEnv

    from pivotgym.registry import reset_registry

    class Lenient:
        name, version = "notebook/lenient", "1"

        def verify(self, context, candidate):
            return pivotgym.Verdict.ok() if candidate.startswith("add") else pivotgym.Verdict.fail("not_an_add")

    base = Registry.from_plugins(PluginManager())  # the builtins only: a plugin id to collide with
    base._register_environments("someplugin", "taken/env-v0", CounterEnv)
    reset_registry(base)
    try:
        pivotgym.register("notebook/counter-v0", CounterEnv, verifier=Lenient(), description="mine")
        env = pivotgym.make("notebook/counter-v0")
        assert isinstance(env, CounterEnv) and pivotgym.verifier_for("notebook/counter-v0").name == "notebook/lenient"
        assert isinstance(gymnasium.make("pivotgym:notebook/counter-v0").unwrapped, CounterEnv)
        assert pivotgym.check_env("notebook/counter-v0").ok
        assert base.envs["notebook/counter-v0"].plugin == "__main__"

        pivotgym.register("notebook/counter-v0", CounterEnv, verifier="exact")  # the cell, run again
        assert (
            base.envs["notebook/counter-v0"].verifier == "exact" and base.envs["notebook/counter-v0"].description == ""
        )
        with pytest.raises(RegistryError, match="belongs to plugin 'someplugin'"):
            pivotgym.register("taken/env-v0", CounterEnv)
        with pytest.raises(RegistryError, match="neither a verifier name"):
            pivotgym.register("notebook/other-v0", CounterEnv, verifier=42)
        with pytest.raises(RegistryError, match="must look like"):
            pivotgym.register("no-slash", CounterEnv)
    finally:
        reset_registry()
