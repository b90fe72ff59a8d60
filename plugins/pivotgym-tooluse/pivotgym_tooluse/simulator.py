"""The executable tools of BFCL's multi-turn tasks: its stdlib-only simulator classes, held per episode.

We instantiate the classes ourselves (instead of BFCL's ``execute_multi_turn_func_call``, which keeps
instances in module globals) so that every env owns its state and a ``deepcopy`` is a faithful snapshot. The
simulators seed their own ``random.Random`` from the scenario, so execution is deterministic.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym.types import ToolCall
from pivotgym.verify import coerce_value
from pivotgym_tooluse.schemas import json_type


def _format_result(result: Any) -> str:
    """A tool result as text, the way BFCL shows it to models (dicts as JSON)."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class ToolBackend:
    """The simulator instances of one task, callable by method name."""

    def __init__(
        self,
        involved_classes: Sequence[str],
        initial_config: Mapping[str, Any],
        long_context: bool = False,
        docs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

        self.instances: dict[str, Any] = {}
        self.owner: dict[str, str] = {}
        self.docs = dict(docs or {})
        for class_name in involved_classes:
            module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
            instance = getattr(module, class_name)()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(
                    copy.deepcopy(dict(initial_config.get(class_name, {}))), long_context=long_context
                )
            self.instances[class_name] = instance
            for name, _ in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.owner[name] = class_name

    def copy(self) -> ToolBackend:
        return copy.deepcopy(self)

    def has(self, name: str) -> bool:
        return name in self.owner

    def parameter_names(self, name: str) -> list[str] | None:
        """Parameter names of a method in order (for positional python-syntax arguments)."""
        if name not in self.owner:
            return None
        method = getattr(self.instances[self.owner[name]], name)
        return [p for p in inspect.signature(method).parameters if p != "self"]

    def _coerce(self, call: ToolCall) -> dict[str, Any]:
        props = ((self.docs.get(call.name) or {}).get("parameters") or {}).get("properties") or {}
        return {
            k: coerce_value(v, json_type(props[k].get("type")) if isinstance(props.get(k), Mapping) else None)
            for k, v in call.arguments.items()
        }

    def call(self, call: ToolCall) -> str:
        """Execute one call and return its result as text; failures come back as an error text."""
        if call.name not in self.owner:
            return f"Error during execution: no tool named {call.name!r}"
        method = getattr(self.instances[self.owner[call.name]], call.name)
        try:
            return _format_result(method(**self._coerce(call)))
        except Exception as exc:
            return f"Error during execution: {exc}"

    def state(self) -> dict[str, dict[str, Any]]:
        """The public attributes of every instance: what BFCL's state check compares."""
        return {
            cls: {k: v for k, v in vars(inst).items() if not k.startswith("_")} for cls, inst in self.instances.items()
        }

    def state_diff(self, other: ToolBackend) -> list[str]:
        """``class.attribute`` names whose values differ between two backends of the same task."""
        mine, theirs = self.state(), other.state()
        diff = []
        for cls in sorted(set(mine) | set(theirs)):
            a, b = mine.get(cls, {}), theirs.get(cls, {})
            diff += [f"{cls}.{k}" for k in sorted(set(a) | set(b)) if a.get(k, _ABSENT) != b.get(k, _ABSENT)]
        return diff


_ABSENT = object()
