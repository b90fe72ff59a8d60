"""The registry: every env, verifier, suite, sandbox and sampler that the loaded plugins registered.

``make("planning/blocks-v0")`` builds an env; every env id is also registered with gymnasium so that
``gymnasium.make("pivotgym:planning/blocks-v0")`` works. Factories may be callables or ``"module:attr"``
strings (imported on first use, so loading plugins stays cheap).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from pivotgym.errors import RegistryError
from pivotgym.execution import set_plugins_changed_hook
from pivotgym.plugins import PluginInfo, PluginManager
from pivotgym.sandbox import set_sandbox_maker
from pivotgym.types import is_env_id
from pivotgym.verify import set_env_maker
from pivotgym.verify.llm_judge import set_sampler_maker

Factory = Callable[..., Any] | str


def resolve(factory: Factory) -> Callable[..., Any]:
    """Turn a ``"module:attr"`` string into the object it names (callables pass through)."""
    if callable(factory):
        return factory
    module_name, _, attr = str(factory).partition(":")
    if not attr:
        raise RegistryError(f"factory {factory!r} must look like 'package.module:Name'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class EnvSpec:
    """A registered environment."""

    id: str
    factory: Factory
    plugin: str
    verifier: str | None = None
    exact_verifier: str = "exact"
    splits: tuple[str, ...] | None = None
    description: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: why the env cannot be used (its plugin lost its verifier id to another plugin), else None
    problem: str | None = None
    #: the env this one is a variant of (its factory, verifier and splits, with :attr:`kwargs` fixed), else None
    base: str | None = None

    def resolved_splits(self) -> tuple[str, ...]:
        """The declared splits, else the ``splits`` attribute of the factory (imported on demand)."""
        if self.splits is None:
            try:
                self.splits = tuple(getattr(resolve(self.factory), "splits", ()) or ())
            except Exception:
                return ()
        return self.splits

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "plugin": self.plugin,
            "verifier": self.verifier,
            "exact_verifier": self.exact_verifier,
            "splits": list(self.resolved_splits()),
            "description": self.description,
            "error": self.problem,
        }


@dataclass
class Entry:
    """A registered verifier, sandbox or sampler."""

    name: str
    factory: Factory
    plugin: str
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "plugin": self.plugin, "description": self.description}


@dataclass
class SuiteSpec:
    """A named set of envs with a role each (``in_domain`` or ``ood``) and options for evaluation."""

    name: str
    members: dict[str, str]
    plugin: str
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "plugin": self.plugin, "members": self.members, "description": self.description}


KINDS = ("environments", "verifiers", "suites", "sandboxes", "samplers", "user_simulators")

#: distributions whose ids a third-party plugin can never take over, whatever the load order
FIRST_PARTY_DISTRIBUTIONS = frozenset(
    {"pivotgym", "pivotgym-planning", "pivotgym-tooluse", "pivotgym-swe", "pivotgym-reasoning", "pivotgym-tau2"}
)


class Registry:
    """Collects what every plugin registers, isolating each plugin's errors."""

    def __init__(self, plugins: PluginManager) -> None:
        self.plugins = plugins
        self.envs: dict[str, EnvSpec] = {}
        self.verifiers: dict[str, Entry] = {}
        self.suites: dict[str, SuiteSpec] = {}
        self.sandboxes: dict[str, Entry] = {}
        self.samplers: dict[str, Entry] = {}
        self.user_simulators: dict[str, Entry] = {}
        #: every duplicate id seen while loading: ``{"kind", "id", "winner", "loser"}``
        self.conflicts: list[dict[str, str]] = []

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_plugins(cls, plugins: PluginManager) -> Registry:
        registry = cls(plugins)
        for kind in KINDS:
            registry._collect(kind)
        registry._resolve_variants()
        registry._check_verifier_owners()
        return registry

    def _resolve_variants(self) -> None:
        """Give every variant (an env registered with ``base=``) its base env's factory, verifiers, splits and
        keyword arguments (its own win), once every plugin has registered: a variant may name any plugin's
        env, a variant's included. A base that is missing, or a chain that loops, makes the variant unusable
        with a problem that says so."""
        pending = [spec for spec in self.envs.values() if spec.base is not None and spec.factory is None]
        while pending:
            ready = [s for s in pending if s.base in self.envs and self.envs[s.base].factory is not None]
            for spec in ready:
                _adopt_base(spec, self.envs[spec.base])  # type: ignore[index]
            if not ready:
                for spec in pending:
                    missing = spec.base not in self.envs
                    spec.factory = _unusable
                    spec.problem = f"env {spec.id!r} is a variant of {spec.base!r}, which " + (
                        "no plugin registers (`pivotgym envs` lists the ids)" if missing else "is a variant loop"
                    )
                    self._info(spec.plugin).record(spec.problem)
                return
            pending = [s for s in pending if s not in ready]

    def _collect(self, kind: str) -> None:
        """Call every plugin's ``register_<kind>`` hook (pluggy's call order) with a ``register`` that knows
        which plugin is registering."""
        register = getattr(self, f"_register_{kind}")

        def register_for(owner: str) -> dict[str, Any]:
            def bound(*args: Any, **kwargs: Any) -> None:
                register(owner, *args, **kwargs)

            return {"register": bound}

        self.plugins.call_each(f"register_{kind}", register_for)

    def _check_verifier_owners(self) -> None:
        """An env must never silently run with another plugin's verifier: when the env's plugin registered the
        env's verifier id itself but lost that id to another plugin, the env is marked unusable (``make`` and
        verifier lookups raise) and its plugin gets an error naming both plugins. An env naming a verifier its
        plugin did not register (``exact``, a shared one) is fine."""
        lost = {(c["id"], c["loser"]): c["winner"] for c in self.conflicts if c["kind"] == "verifier"}
        for spec in self.envs.values():
            for name in (spec.verifier, spec.exact_verifier):
                winner = lost.get((name, spec.plugin)) if name else None
                if winner is None:
                    continue
                spec.problem = (
                    f"env {spec.id!r} of plugin {spec.plugin!r} uses verifier {name!r}, but plugin {winner!r} "
                    f"owns that id (plugin {spec.plugin!r} registered it too and lost it), so the env is disabled "
                    f"rather than judged by another plugin's verifier. Rename the verifier id in {spec.plugin!r}, "
                    f"or uninstall {winner!r}."
                )
                self._info(spec.plugin).record(spec.problem)
                break

    def _info(self, plugin: str) -> PluginInfo:
        return self.plugins.infos.setdefault(plugin, PluginInfo(name=plugin))

    def _claim(self, table: dict[str, Any], key: str, owner: str, what: str) -> bool:
        """Whether ``owner`` may register ``key`` in ``table``; a duplicate is never silent.

        The first registration wins, except that a first-party plugin (see :data:`FIRST_PARTY_DISTRIBUTIONS`)
        always keeps its own ids: a third-party plugin that registered one of them earlier loses it again.
        The loser gets an error naming both plugins and the id is recorded in ``self.conflicts``.
        """
        if key not in table:
            return True
        first = table[key].plugin
        if first == owner:
            self._info(owner).record(
                f"{what} id {key!r} is registered twice by plugin {owner!r}; the second registration was ignored"
            )
            return False
        takeover = self.is_first_party(owner) and not self.is_first_party(first)
        winner, loser = (owner, first) if takeover else (first, owner)
        why = (
            "first-party ids cannot be taken over by a third-party plugin"
            if takeover
            else "the plugin that registered it first keeps it"
        )
        self._info(loser).record(
            f"duplicate {what} id {key!r}: registered by both plugin {winner!r} ({self._dist(winner)}) and "
            f"plugin {loser!r} ({self._dist(loser)}); {why}, so {winner!r} owns it and {loser!r} lost it. "
            f"Rename the id in {loser!r}, or uninstall one of the two."
        )
        self.conflicts.append({"kind": what, "id": key, "winner": winner, "loser": loser})
        if takeover:
            del table[key]
        return takeover

    def is_first_party(self, plugin: str) -> bool:
        """Whether ``plugin`` comes from a first-party distribution (the core or a bundled domain plugin)."""
        info = self.plugins.infos.get(plugin)
        if info is None or not info.distribution:
            return False
        return _normal(info.distribution) in FIRST_PARTY_DISTRIBUTIONS

    def _dist(self, plugin: str) -> str:
        info = self.plugins.infos.get(plugin)
        return f"distribution {info.distribution}" if info is not None and info.distribution else "no distribution"

    def _register_environments(
        self,
        owner: str,
        id: str,
        factory: Factory | None,
        *,
        verifier: str | None = None,
        exact_verifier: str = "exact",
        splits: tuple[str, ...] | list[str] | None = None,
        description: str = "",
        base: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not is_env_id(id):
            raise RegistryError(f"env id {id!r} must look like 'domain/name-v0'")
        if factory is None and base is None:
            raise RegistryError(f"env {id!r}: give a factory, or base= the id of the env it is a variant of")
        if not self._claim(self.envs, id, owner, "env"):
            return
        if splits is None and isinstance(factory, type):
            splits = getattr(factory, "splits", None)
        self.envs[id] = EnvSpec(
            id,
            None if base is not None else factory,  # type: ignore[arg-type]  # a variant's: set by _resolve_variants
            owner,
            verifier,
            exact_verifier,
            tuple(splits) if splits else None,
            description,
            dict(kwargs),
            base=base,
        )
        known = self.envs.get(base) if base is not None else None
        if known is not None and known.factory is not None:  # user code registering after the plugins
            _adopt_base(self.envs[id], known)

    def _register_named(
        self, table: dict[str, Entry], what: str, owner: str, name: str, factory: Factory, *, description: str = ""
    ) -> None:
        if self._claim(table, name, owner, what):
            table[name] = Entry(name, factory, owner, description)

    def _register_verifiers(self, owner: str, name: str, factory: Factory, *, description: str = "") -> None:
        self._register_named(self.verifiers, "verifier", owner, name, factory, description=description)

    def _register_sandboxes(self, owner: str, name: str, factory: Factory, *, description: str = "") -> None:
        self._register_named(self.sandboxes, "sandbox", owner, name, factory, description=description)

    def _register_samplers(self, owner: str, name: str, factory: Factory, *, description: str = "") -> None:
        self._register_named(self.samplers, "sampler", owner, name, factory, description=description)

    def _register_user_simulators(self, owner: str, name: str, factory: Factory, *, description: str = "") -> None:
        self._register_named(self.user_simulators, "user simulator", owner, name, factory, description=description)

    def _register_suites(
        self, owner: str, name: str, members: Mapping[str, str], *, description: str = "", **options: Any
    ) -> None:
        bad = {env: role for env, role in members.items() if role not in ("in_domain", "ood")}
        if bad:
            raise RegistryError(f"suite {name!r}: roles must be 'in_domain' or 'ood', got {bad}")
        if self._claim(self.suites, name, owner, "suite"):
            self.suites[name] = SuiteSpec(name, dict(members), owner, description, dict(options))

    # ---------------------------------------------------------------- lookups
    def env_spec(self, env_id: str) -> EnvSpec:
        try:
            return self.envs[env_id]
        except KeyError:
            raise RegistryError(self._unknown("env", env_id, self.envs, "pivotgym envs")) from None

    def usable_env_spec(self, env_id: str) -> EnvSpec:
        """The spec of an env that may be built and judged (``env_spec`` plus its :attr:`EnvSpec.problem`)."""
        spec = self.env_spec(env_id)
        if spec.problem:
            raise RegistryError(spec.problem)
        return spec

    def make(self, env_id: str, **kwargs: Any) -> Any:
        spec = self.usable_env_spec(env_id)
        env = _load_factory("env", env_id, spec.plugin, spec.factory)(**{**spec.kwargs, **kwargs})
        env.env_id = env_id
        env.default_verifier = spec.verifier
        return env

    def _entry(self, table: Mapping[str, Entry], what: str, name: str) -> Entry:
        try:
            return table[name]
        except KeyError:
            command = f"pivotgym {_KIND_OF[what].replace('_', '-')}"
            raise RegistryError(self._unknown(what, name, table, command)) from None

    def _make_entry(self, table: Mapping[str, Entry], what: str, name: str, *args: Any, **kwargs: Any) -> Any:
        entry = self._entry(table, what, name)
        return _load_factory(what, name, entry.plugin, entry.factory)(*args, **kwargs)

    def make_verifier(self, name: str, **kwargs: Any) -> Any:
        """The verifier registered as ``name``, or the composition a ``|``-joined name describes
        (:mod:`pivotgym.verify.compose`: ``planning/optimal|judge``, ``message:judge|tau2/functional``)."""
        from pivotgym.verify.compose import composition, make_composed

        if composition(name) is not None:
            if kwargs:
                raise RegistryError(f"verifier {name!r}: a composed verifier takes no options (got {sorted(kwargs)})")
            return make_composed(name, self.make_verifier)
        return self._make_entry(self.verifiers, "verifier", name, **kwargs)

    def envs_using(self, verifier: str) -> list[str]:
        """The ids of the envs whose functional or exact-match verifier is ``verifier``, sorted."""
        return sorted(spec.id for spec in self.envs.values() if verifier in (spec.verifier, spec.exact_verifier))

    def make_sampler(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._make_entry(self.samplers, "sampler", name, *args, **kwargs)

    def make_sandbox(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._make_entry(self.sandboxes, "sandbox", name, *args, **kwargs)

    def make_user_simulator(self, name: str, **options: Any) -> Any:
        return self._make_entry(self.user_simulators, "user simulator", name, **options)

    def suite(self, name: str) -> SuiteSpec:
        try:
            return self.suites[name]
        except KeyError:
            raise RegistryError(self._unknown("suite", name, self.suites, "pivotgym suites")) from None

    def verifier_name_for(self, env_id: str, kind: str = "functional") -> str:
        """The name of an env's functional verifier (``kind="functional"``), its exact-match one (``"exact"``),
        or ``kind`` itself as a verifier name; in a composed name (``functional|judge``) each part is resolved."""
        from pivotgym.verify.compose import composition, join_composition

        parts = composition(kind)
        if parts is not None:
            return join_composition([(k, self.verifier_name_for(env_id, part)) for k, part in parts])
        spec = self.usable_env_spec(env_id)
        if kind == "exact":
            return spec.exact_verifier
        if kind != "functional":
            return kind  # an explicit verifier name
        return spec.verifier or spec.exact_verifier

    def _unknown(self, what: str, name: str, table: Mapping[str, Any], command: str) -> str:
        """The error for an unknown id: close matches and the listing command, and, when a plugin that failed to
        load (or whose hook for this kind raised) may be what provides it, that plugin and where its traceback is.

        A failed plugin is named when the id's namespace (``arith`` in ``arith/chain-v0``) is the plugin's name
        or distribution or its failure message quotes the id, or else when no registered id is close to the one
        asked for.
        """
        close = difflib.get_close_matches(name, list(table), n=3)
        message = f"unknown {what} {name!r}."
        if close:
            message += f" Did you mean {', '.join(close)}?"
        message += f" Run `{command}` to list what is installed."
        hook = f"register_{_KIND_OF[what]}"
        failed = {info.name: reason for info in self.plugins.infos.values() if (reason := info.failure_for(hook))}
        namespace = _normal(name.split("/", 1)[0]) if "/" in name else None
        owners = [
            plugin
            for plugin in failed
            if namespace and namespace in self._namespaces(plugin) or repr(name) in failed[plugin]
        ]
        if owners:
            plugin = owners[0]
            return (
                f"unknown {what} {name!r}: plugin {plugin!r}, which provides it, could not register its ids "
                f"({_short(failed[plugin])}); `pivotgym plugins` shows its traceback. Fix, upgrade or "
                f"reinstall it."
            )
        if failed and not close:
            reasons = "; ".join(f"{p!r}: {_short(failed[p])}" for p in sorted(failed))
            message += (
                f" These plugins could not register all their ids and may provide it: {reasons} "
                f"(`pivotgym plugins` shows the tracebacks)."
            )
        return message

    def _namespaces(self, plugin: str) -> set[str]:
        """The id namespaces a plugin is taken to own: its name and its distribution's without ``pivotgym-``."""
        info = self.plugins.infos.get(plugin)
        names = {plugin, info.distribution if info and info.distribution else ""}
        return {_normal(n).removeprefix("pivotgym-") for n in names if n}


#: the hook kind behind each word an error uses
_KIND_OF = {
    "env": "environments",
    "verifier": "verifiers",
    "suite": "suites",
    "sampler": "samplers",
    "sandbox": "sandboxes",
    "user simulator": "user_simulators",
}


def _normal(name: str) -> str:
    """A distribution or namespace name compared case- and separator-insensitively (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _short(reason: str, limit: int = 160) -> str:
    """The first line of a failure message, cut to ``limit`` characters."""
    first = reason.splitlines()[0] if reason else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _adopt_base(spec: EnvSpec, base: EnvSpec) -> None:
    """Make the variant ``spec`` build as ``base`` with its own keyword arguments winning, judged like it."""
    spec.factory = base.factory
    spec.kwargs = {**base.kwargs, **spec.kwargs}
    spec.verifier = spec.verifier or base.verifier
    spec.exact_verifier = base.exact_verifier
    spec.splits = spec.splits or base.splits
    spec.description = spec.description or f"{base.id} with {', '.join(sorted(spec.kwargs))} set"
    spec.problem = spec.problem or base.problem


def _unusable(**_: Any) -> Any:
    """The factory of an env that cannot be built (its :attr:`EnvSpec.problem` says why; ``make`` raises that)."""
    raise RegistryError("this env cannot be built: `pivotgym plugins` says why")


def _load_factory(what: str, name: str, plugin: str, factory: Factory) -> Callable[..., Any]:
    """``resolve(factory)``, with an error naming the id and its plugin when the factory path is wrong."""
    try:
        return resolve(factory)
    except (ImportError, AttributeError, RegistryError) as exc:
        raise RegistryError(
            f"{what} {name!r} of plugin {plugin!r}: cannot load its factory {factory!r} ({exc}); fix the "
            f"'package.module:Name' path the plugin registers, or install what that module imports"
        ) from exc


# -------------------------------------------------------------------- the process-wide registry
_lock = threading.RLock()
_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, built on first use from the builtins and installed entry points.

    A plugin module imported before pivotgym is still being imported when the registry is first built (its
    ``import pivotgym`` builds it before the module has defined its hooks): that registry is returned but not
    kept, so the next call, once the module has finished importing, builds the whole one."""
    global _registry
    with _lock:
        if _registry is not None:
            return _registry
        plugins = PluginManager()
        plugins.load_builtins()
        plugins.load_entry_points()
        registry = Registry.from_plugins(plugins)
        _bridge_gymnasium(registry)
        if not plugins.incomplete:
            _registry = registry
        return registry


def reset_registry(registry: Registry | None = None) -> None:
    """Drop the cached registry (tests), or install ``registry`` as the process-wide one."""
    global _registry
    with _lock:
        _registry = registry
        if registry is not None:
            _bridge_gymnasium(registry)


def _bridge_gymnasium(registry: Registry) -> None:
    """Register every env id with gymnasium so ``gymnasium.make("pivotgym:<id>")`` works."""
    for env_id in registry.envs:
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=_GymEntryPoint(env_id), disable_env_checker=False)


class _GymEntryPoint:
    """A picklable gymnasium entry point that builds the env through the pivotgym registry."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, **kwargs: Any) -> Any:
        return get_registry().make(self.env_id, **kwargs)


def make(env_id: str, **kwargs: Any) -> Any:
    """Build the env registered as ``env_id`` (keyword arguments override the registered ones)."""
    return get_registry().make(env_id, **kwargs)


def list_envs() -> list[EnvSpec]:
    return sorted(get_registry().envs.values(), key=lambda s: s.id)


def make_verifier(name: str, **kwargs: Any) -> Any:
    return get_registry().make_verifier(name, **kwargs)


def verifier_for(env_id: str, kind: str = "functional", **kwargs: Any) -> Any:
    """The verifier of ``env_id``: ``kind`` is ``"functional"`` (default), ``"exact"`` or a verifier name."""
    registry = get_registry()
    return registry.make_verifier(registry.verifier_name_for(env_id, kind), **kwargs)


def make_user_simulator(name: str, **options: Any) -> Any:
    """The user simulator ``name`` (``pivotgym user-simulators`` lists them) with its options."""
    return get_registry().make_user_simulator(name, **options)


def make_sampler(name: str, model: str, options: Mapping[str, Any] | None = None, **defaults: Any) -> Any:
    """The sampler backend ``name`` (``pivotgym samplers`` lists them) for ``model``: the one way every caller
    (evaluation, profiling's reference policy, trainers' engines, the experiment) builds a sampler.

    ``options`` are what the user set: every key goes to the backend, which refuses (``TypeError``) the ones it
    does not take. ``defaults`` are the caller's preferences, given only where the backend's constructor names
    them and not None (``max_batch_size`` means something to ``hf`` but not to ``vllm``); ``options`` win."""
    registry = get_registry()
    if name not in registry.samplers:
        registry.make_sampler(name)  # RegistryError: names the sampler and what is registered
    params = inspect.signature(resolve(registry.samplers[name].factory)).parameters
    named = {k for k, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    kwargs = {k: v for k, v in defaults.items() if v is not None and k in named}
    kwargs.update(options or {})
    return registry.make_sampler(name, model=model, **kwargs)


#: the plugin name that :func:`register` files user code's envs and verifiers under
USER_PLUGIN = "__main__"


def register(
    env_id: str,
    factory: Factory | None,
    *,
    verifier: str | Any = None,
    exact_verifier: str = "exact",
    splits: tuple[str, ...] | list[str] | None = None,
    description: str = "",
    **kwargs: Any,
) -> None:
    """Register an env from user code (a notebook, a script), as ``gymnasium.register`` does for gymnasium:
    ``pivotgym.make(env_id)``, ``gymnasium.make("pivotgym:" + env_id)``, ``check_env`` and the profiler then
    find it, under the plugin name ``__main__``.

    ``verifier`` is a registered verifier's name, or a verifier itself (an object with ``verify``) or a
    callable that makes one, which is registered under ``env_id``'s own name. ``factory=None, base=ENV_ID`` and
    keyword arguments register a variant of a registered env (its factory and verifier, those arguments fixed),
    as a variant file does. Registering the same id again replaces what user code registered before
    (re-running a notebook cell); an id a plugin owns is an error. What is registered lives in this process's
    registry: worker processes (the ``process`` and ``ray`` executors) start without it, so judge with
    ``executor="serial"`` here, or ship the env as a plugin or a variant file (docs/plugins.md) to fan out."""
    registry = get_registry()
    _refuse_plugin_id(registry.envs, env_id, "env")
    if verifier is not None and not isinstance(verifier, str):
        _refuse_plugin_id(registry.verifiers, env_id, "verifier")
        made = verifier
        maker = (lambda **_: made) if hasattr(made, "verify") and not isinstance(made, type) else made
        if not callable(maker):
            raise RegistryError(
                f"register({env_id!r}, verifier=...): {type(made).__name__} is neither a verifier name, a "
                "verifier (an object with verify(context, candidate)) nor a callable that makes one"
            )
        registry.verifiers.pop(env_id, None)
        registry._register_verifiers(USER_PLUGIN, env_id, maker, description=f"the verifier of {env_id}")
        verifier = env_id
    base = kwargs.get("base")
    if base is not None and base not in registry.envs:
        raise RegistryError(f"register({env_id!r}, base={base!r}): no env {base!r} is registered (`pivotgym envs`)")
    registry.envs.pop(env_id, None)
    registry._register_environments(
        USER_PLUGIN,
        env_id,
        factory,
        verifier=verifier,
        exact_verifier=exact_verifier,
        splits=splits,
        description=description,
        **kwargs,
    )
    _bridge_gymnasium(registry)


def _refuse_plugin_id(table: Mapping[str, Any], key: str, what: str) -> None:
    entry = table.get(key)
    if entry is not None and entry.plugin != USER_PLUGIN:
        raise RegistryError(
            f"{what} id {key!r} belongs to plugin {entry.plugin!r}; register yours under another id "
            "(e.g. 'mine/" + key.split("/", 1)[-1] + "')"
        )


def list_plugins() -> list[PluginInfo]:
    return list(get_registry().plugins.infos.values())


def _make_sandbox(name: str, **kwargs: Any) -> Any:
    return get_registry().make_sandbox(name, **kwargs)


# The low layers build envs, samplers and sandboxes by name through the registry without importing it (see
# ``pivotgym.verify.set_env_maker``, ``pivotgym.verify.llm_judge.set_sampler_maker``,
# ``pivotgym.sandbox.set_sandbox_maker`` and
# ``pivotgym.execution.set_plugins_changed_hook``). The lambda looks ``make`` up
# on each call, so a patched ``pivotgym.registry.make`` is honoured as before.
set_env_maker(lambda env_id, **kwargs: make(env_id, **kwargs))
set_sampler_maker(lambda name, model, options: make_sampler(name, model, options))
set_sandbox_maker(_make_sandbox)
set_plugins_changed_hook(lambda: reset_registry())
