"""Plugin discovery and loading: pluggy + the ``pivotgym`` entry-point group.

* The core's own pieces live in :mod:`pivotgym.builtins`, registered first as the plugin ``builtins``.
* Installed distributions declare ``[project.entry-points.pivotgym] NAME = "module"``.
* ``PIVOTGYM_LOAD_PLUGINS=a,b`` loads only those entry points; ``PIVOTGYM_DISABLE_PLUGIN_AUTOLOAD=1`` loads
  none (the built-ins still load).
* A plugin that fails to import is recorded with its traceback and skipped; the others still load.
"""

from __future__ import annotations

import importlib
import os
import traceback
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

    @property
    def error(self) -> str | None:
        return "; ".join(self.errors) if self.errors else None

    def record(self, message: str, tb: str | None = None) -> None:
        self.errors.append(message)
        if tb:
            self.tracebacks.append(tb)

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
        except Exception as exc:  # noqa: BLE001 - pluggy validation errors name the bad hook
            info.record(f"could not register: {exc}", traceback.format_exc())

    def load_builtins(self) -> None:
        import pivotgym.builtins as builtins
        from pivotgym._version import __version__

        self.add(builtins, BUILTIN_NAME, version=__version__, distribution="pivotgym")

    def load_entry_points(self) -> None:
        """Import every ``pivotgym`` entry point (respecting the env vars), recording failures per plugin."""
        if _truthy(os.environ.get(ENV_NO_AUTOLOAD)):
            return
        allow = _allow_list()
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if allow is not None and ep.name not in allow:
                continue
            if ep.name in self.infos:
                first = self.infos[ep.name].distribution
                self.infos[ep.name].record(f"entry point name {ep.name!r} is declared by both {first} and {_dist_name(ep)}")
                continue
            info = self.infos.setdefault(ep.name, PluginInfo(name=ep.name, module=ep.value))
            info.distribution = _dist_name(ep)
            info.version = ep.dist.version if ep.dist else None
            try:
                plugin = ep.load()
            except BaseException as exc:  # noqa: BLE001 - SystemExit from a broken import counts too
                info.record(f"import failed: {exc!r}", traceback.format_exc())
                continue
            self.add(plugin, ep.name, version=info.version, distribution=info.distribution)
        if allow:
            for name in sorted(allow - set(self.infos)):
                self.infos[name] = PluginInfo(name=name, errors=[f"{ENV_LOAD_ONLY} names {name!r}, which is not installed"])

    def load_module(self, module_name: str, name: str | None = None) -> None:
        """Load a plugin from a module path (for programmatic use and tests)."""
        name = name or module_name
        try:
            module = importlib.import_module(module_name)
        except BaseException as exc:  # noqa: BLE001
            self.infos.setdefault(name, PluginInfo(name=name, module=module_name)).record(
                f"import failed: {exc!r}", traceback.format_exc()
            )
            return
        self.add(module, name)

    def hookimpls(self, hook_name: str) -> list[tuple[str, Any]]:
        """(plugin name, function) pairs implementing ``hook_name``, in registration order."""
        caller = getattr(self.pm.hook, hook_name)
        return [(impl.plugin_name, impl.function) for impl in caller.get_hookimpls()]


def _dist_name(ep: metadata.EntryPoint) -> str | None:
    return ep.dist.name if ep.dist else None
