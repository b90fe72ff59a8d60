"""Plugin discovery and loading: pluggy + the ``pivotgym`` entry-point group.

* The core's own pieces live in :mod:`pivotgym.builtins`, registered first as the plugin ``builtins``.
* Installed distributions declare ``[project.entry-points.pivotgym] NAME = "module"``.
* ``PIVOTGYM_LOAD_PLUGINS=a,b`` loads only those entry points; ``PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD=1`` loads
  none (the built-ins still load).
* A plugin that fails to import is recorded with its traceback and skipped; the others still load.
* Hooks are called in pluggy's order (:meth:`PluginManager.call_each`): ``tryfirst`` first, then the most
  recently registered plugin first, ``trylast`` last; wrappers wrap. Entry points are registered in reverse
  name order after the built-ins, so plugins of equal priority are called in entry-point name order, then the
  built-ins.
"""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

import pivotgym.hookspecs as hookspecs

ENTRY_POINT_GROUP = "pivotgym"
ENV_LOAD_ONLY = "PIVOTGYM_LOAD_PLUGINS"
ENV_NO_AUTOLOAD = "PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD"
BUILTIN_NAME = "builtins"


@dataclass
class PluginInfo:
    """What ``pivotgym plugins`` shows for one plugin."""

    name: str
    version: str | None = None
    module: str | None = None
    distribution: str | None = None
    errors: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    #: why the plugin may lack ids it provides: ``"load"`` when it could not be imported or registered, else the
    #: name of each hook that raised, with the first message of each
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        return "; ".join(self.errors) if self.errors else None

    def record(self, message: str, tb: str | None = None) -> None:
        self.errors.append(message)
        if tb:
            self.tracebacks.append(tb)

    def fail(self, where: str, message: str, tb: str | None = None) -> None:
        """Record an error that kept the plugin from registering everything: ``where`` is ``"load"`` or a hook."""
        self.failures.setdefault(where, message)
        self.record(message, tb)

    def failure_for(self, hook_name: str) -> str | None:
        """Why ids this plugin registers through ``hook_name`` may be missing (a failed load or that hook
        raising), else None."""
        return self.failures.get("load") or self.failures.get(hook_name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "module": self.module,
            "distribution": self.distribution,
            "error": self.error,
            "traceback": "\n".join(self.tracebacks) or None,
        }


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _allow_list() -> set[str] | None:
    raw = os.environ.get(ENV_LOAD_ONLY)
    if raw is None or not raw.strip():
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


class PluginManager:
    """A pluggy manager that remembers, per plugin, its version and every error it caused."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        #: entry points whose module was still being imported when loaded (it imported pivotgym, which built
        #: the registry, before defining its hooks): registered without hooks, so the registry is built again
        self.incomplete: list[str] = []

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def add(self, plugin: Any, name: str, *, version: str | None = None, distribution: str | None = None) -> None:
        """Register an already-imported plugin object (module or instance)."""
        info = self.infos.setdefault(name, PluginInfo(name=name))
        info.version = version
        info.distribution = distribution
        info.module = getattr(plugin, "__name__", type(plugin).__name__)
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:
            info.fail("load", f"could not register: {exc}", traceback.format_exc())

    def load_builtins(self) -> None:
        import pivotgym.builtins as builtins
        from pivotgym._version import __version__

        self.add(builtins, BUILTIN_NAME, version=__version__, distribution="pivotgym")

    def load_entry_points(self) -> None:
        """Import every ``pivotgym`` entry point (respecting the env vars), recording failures per plugin.

        Entry points are imported in name order and registered in reverse name order: pluggy calls the most
        recently registered plugin first, so hooks of equal priority run in entry-point name order (``tryfirst``
        and ``trylast`` still move a plugin), and on a duplicate id between two third-party plugins the one whose
        name sorts first keeps it.
        """
        if _truthy(os.environ.get(ENV_NO_AUTOLOAD)):
            return
        allow = _allow_list()
        loaded: list[tuple[str, Any, PluginInfo]] = []
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if allow is not None and ep.name not in allow:
                continue
            if ep.name in self.infos:
                first = self.infos[ep.name].distribution
                self.infos[ep.name].record(
                    f"entry point name {ep.name!r} is declared by both {first} and {_dist_name(ep)}"
                )
                continue
            info = self.infos.setdefault(ep.name, PluginInfo(name=ep.name, module=ep.value))
            info.distribution = _dist_name(ep)
            info.version = ep.dist.version if ep.dist else None
            try:
                plugin = ep.load()
            except BaseException as exc:
                info.fail("load", f"import failed: {exc!r}", traceback.format_exc())
                continue
            if getattr(getattr(plugin, "__spec__", None), "_initializing", False):
                self.incomplete.append(ep.name)
            loaded.append((ep.name, plugin, info))
        for name, plugin, info in reversed(loaded):
            self.add(plugin, name, version=info.version, distribution=info.distribution)
        if allow:
            for name in sorted(allow - set(self.infos)):
                missing = self.infos[name] = PluginInfo(name=name)
                missing.fail("load", f"{ENV_LOAD_ONLY} names {name!r}, which is not installed")

    def load_module(self, module_name: str, name: str | None = None) -> None:
        """Load a plugin from a module path (for programmatic use and tests)."""
        name = name or module_name
        try:
            module = importlib.import_module(module_name)
        except BaseException as exc:
            self.infos.setdefault(name, PluginInfo(name=name, module=module_name)).fail(
                "load", f"import failed: {exc!r}", traceback.format_exc()
            )
            return
        self.add(module, name)

    def call_each(self, hook_name: str, kwargs_for: Callable[[str], Mapping[str, Any]]) -> list[str]:
        """Call ``hook_name`` once per implementing plugin, in pluggy's call order, isolating their errors.

        The order is exactly the one pluggy's own hook call uses: ``tryfirst`` implementations first, then the
        untagged ones with the most recently registered plugin first, ``trylast`` ones last. Each plugin is
        called through pluggy (:meth:`pluggy.PluginManager.subset_hook_caller`), so every wrapper
        (``wrapper=True`` or ``hookwrapper=True``) runs around it as a wrapper and is never called as a plain
        function. ``kwargs_for(plugin_name)`` gives that plugin's hook arguments (e.g. a ``register`` callback
        that knows who is registering). An exception is recorded on the plugin whose code raised it (the
        implementation, or a wrapper that raised its own) and the remaining plugins are still called.
        Returns the names of the plugins called, in order.
        """
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        plain = [impl for impl in reversed(impls) if not (impl.wrapper or impl.hookwrapper)]
        order = list(dict.fromkeys(impl.plugin_name for impl in plain))
        for name in order:
            others = {impl.plugin for impl in plain if impl.plugin_name != name}
            caller = self.pm.subset_hook_caller(hook_name, others)
            try:
                caller(**kwargs_for(name))
            except Exception as exc:
                culprit = _raised_by(exc, impls) or name
                self.infos.setdefault(culprit, PluginInfo(name=culprit)).fail(
                    hook_name, f"{hook_name} raised {exc!r}", traceback.format_exc()
                )
        return order


def _raised_by(exc: BaseException, impls: list[Any]) -> str | None:
    """The plugin whose hook implementation is the innermost one on ``exc``'s traceback, if any."""
    owners = {getattr(impl.function, "__code__", None): impl.plugin_name for impl in impls}
    owner = None
    tb = exc.__traceback__
    while tb is not None:
        owner = owners.get(tb.tb_frame.f_code, owner)
        tb = tb.tb_next
    return owner


def _dist_name(ep: metadata.EntryPoint) -> str | None:
    return ep.dist.name if ep.dist else None
