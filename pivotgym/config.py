"""The one loader of config files: YAML into checked dataclasses, with errors that say FILE:LINE.

Every config pivotgym reads (experiment, trainer, YAML env and suite files) goes through :func:`read_yaml` and
:func:`build` before anything runs or any folder is created:

* an unknown key is an error that names its file and line and suggests the nearest known key
  (``quickstart.yaml:21: select.max_maen: unknown key (did you mean 'max_mean'?)``);
* a value of the wrong type names the field and what it should be (``sft.steps: expected an integer, got
  'ten'``);
* a field declared with :func:`choices` metadata takes only those values (each item, for a list field), named
  with the file's line and a did-you-mean (``quickstart.yaml:39: executor: must be one of process, ray,
  serial, got 'proces' (did you mean 'process'?)``); :func:`check_field_choices` applies the same rule to a config
  built in code;
* a field whose annotation is itself a dataclass is a section, checked the same way, recursively;
* errors a dataclass raises while validating itself (``__post_init__``) get the same location prefix.

All of them are :class:`pivotgym.errors.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from pivotgym.errors import ConfigError, RecordError
from pivotgym.types import check_fields

T = TypeVar("T")

__all__ = [
    "Source",
    "build",
    "check_field_choices",
    "check_keys",
    "check_section",
    "choices",
    "config_fields",
    "did_you_mean",
    "read_yaml",
    "yaml_syntax_error",
]

#: ``field(metadata={INTERNAL: True})`` marks a dataclass field that a config file may not set (e.g. the path
#: the config was read from)
INTERNAL = "pivotgym.internal"
#: the metadata key of :func:`choices`
CHOICES = "pivotgym.choices"


def choices(values: Iterable[str], *, key: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Field metadata (``field(default="process", metadata=choices(EXECUTORS))``): the field, or each item of a
    list field, must be one of ``values``; ``key`` picks the part that must be (``ray:ADDRESS`` -> ``ray``)."""
    return {CHOICES: (tuple(values), key)}


def choice_error(f: dataclasses.Field[Any], value: Any) -> tuple[tuple[str, ...], str] | None:
    """``None`` when ``value`` obeys ``f``'s :func:`choices` (or it has none), else where in it the wrong value
    is (``()``, or ``("1",)`` for a list's second item) and what is wrong."""
    if CHOICES not in f.metadata or value is None:
        return None
    allowed, key = f.metadata[CHOICES]
    listed = isinstance(value, (list, tuple))
    for i, item in enumerate(value if listed else [value]):
        if not isinstance(item, str):
            continue  # the type check names a value of the wrong kind
        picked = key(item) if key else item
        if picked not in allowed:
            where = (str(i),) if listed else ()
            return where, f"must be one of {', '.join(allowed)}, got {item!r}{did_you_mean(picked, allowed)}"
    return None


def check_field_choices(config: Any) -> None:
    """Raise :class:`ConfigError` (``FIELD: must be one of ...``) at the first field of the dataclass
    instance ``config`` outside its :func:`choices`: the file check's rule for configs built in code."""
    for f in dataclasses.fields(config):
        error = choice_error(f, getattr(config, f.name, None))
        if error:
            raise ConfigError(f"{'.'.join((f.name, *error[0]))}: {error[1]}")


@dataclass(frozen=True)
class Source:
    """Where a mapping came from: the file and the line of every key in it (dotted key path -> 1-based line)."""

    path: Path | None = None
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict)

    def line(self, keys: Iterable[str]) -> int | None:
        """The line of ``keys``, or of its nearest enclosing key that has one."""
        keys = tuple(str(k) for k in keys)
        while keys:
            if keys in self.lines:
                return self.lines[keys]
            keys = keys[:-1]
        return None

    def where(self, keys: Iterable[str] = ()) -> str:
        """``FILE:LINE`` (or ``FILE``, or an empty string for a mapping that came from no file)."""
        if self.path is None:
            return ""
        line = self.line(keys)
        return f"{self.path}:{line}" if line else str(self.path)

    def error(self, keys: Iterable[str], message: str, hint: str | None = None) -> ConfigError:
        """A :class:`ConfigError` ``FILE:LINE: dotted.key: message``."""
        keys = tuple(str(k) for k in keys)
        parts = [p for p in (self.where(keys), ".".join(keys)) if p]
        return ConfigError(": ".join([*parts, message]), hint=hint)


def _key_lines(node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*prefix, str(key_node.value))
            out[key] = key_node.start_mark.line + 1
            _key_lines(value_node, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = (*prefix, str(i))
            out[key] = item.start_mark.line + 1
            _key_lines(item, key, out)


def yaml_syntax_error(path: str | os.PathLike[str], exc: yaml.YAMLError) -> str:
    """One line for a YAML parse error: ``FILE:LINE:COLUMN: not valid YAML: PROBLEM`` (the parser's own
    message spans several lines and names ``<unicode string>`` instead of the file)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return f"{path}: not valid YAML: {' '.join(str(exc).split())}"
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    return f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}"


def read_yaml(path: str | os.PathLike[str], *, what: str = "config") -> tuple[Any, Source]:
    """The parsed content of a YAML file and its :class:`Source`; a missing file or a syntax error is one
    :class:`ConfigError` line (``FILE:LINE:COLUMN: not valid YAML: ...``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file {path} does not exist", hint="check the path")
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_syntax_error(path, exc)) from None
    lines: dict[tuple[str, ...], int] = {}
    if node is not None:
        _key_lines(node, (), lines)
    return data, Source(path, lines)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest of ``choices``, or an empty string when none is close."""
    close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def config_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of dataclass ``cls`` a config file may set (init fields not marked :data:`INTERNAL`)."""
    return [f for f in dataclasses.fields(cls) if f.init and not f.metadata.get(INTERNAL)]


def check_keys(
    data: Mapping[str, Any], known: Iterable[str], source: Source = Source(), prefix: tuple[str, ...] = ()
) -> None:
    """Raise :class:`ConfigError` at the first key of ``data`` not in ``known``, with a did-you-mean."""
    known = sorted(set(known))
    for key in data:
        if key not in known:
            raise source.error(
                (*prefix, str(key)),
                f"unknown key{did_you_mean(str(key), known)}",
                hint=f"known keys{' of ' + '.'.join(prefix) if prefix else ''}: {', '.join(known)}",
            )


def _section_type(tp: Any) -> type | None:
    """The dataclass a field annotation names (``Section`` or ``Section | None``), else None."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a) and isinstance(a, type)]
        return found[0] if len(found) == 1 else None
    return None


def _as_mapping(data: Any, source: Source, prefix: tuple[str, ...]) -> Mapping[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        what = ".".join(prefix) or "the file"
        raise source.error(prefix, f"expected a mapping of key: value for {what}, got {type(data).__name__}")
    return data


def check_section(cls: type, data: Any, source: Source = Source(), prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check a *partial* mapping of ``cls``'s fields (keys and types, nested sections too) without building
    it: for sections that override some fields of a config built later (an experiment's ``sft:`` section).
    Returns the mapping as a dict."""
    mapping = _as_mapping(data, source, prefix)
    fields = config_fields(cls)
    check_keys(mapping, [f.name for f in fields], source, prefix)
    hints = typing.get_type_hints(cls)
    for f in fields:
        if f.name not in mapping:
            continue
        keys = (*prefix, f.name)
        section = _section_type(hints.get(f.name, Any))
        if section is not None and isinstance(mapping[f.name], Mapping):
            check_section(section, mapping[f.name], source, keys)
            continue
        try:
            check_fields(cls, {f.name: mapping[f.name]}, required=False)
        except RecordError as exc:  # its message starts with the field (``tags[1]: expected ...``)
            message = ".".join((*prefix, str(exc)))
            where = source.where(keys)
            raise ConfigError(f"{where}: {message}" if where else message) from None
        error = choice_error(f, mapping[f.name])
        if error:
            raise source.error((*keys, *error[0]), error[1])
    return dict(mapping)


def build(cls: type[T], data: Any, source: Source = Source(), prefix: tuple[str, ...] = ()) -> T:
    """Dataclass ``cls`` built from ``data`` after checking it whole: unknown keys, types, required fields,
    nested sections (fields annotated with a dataclass). Errors are :class:`ConfigError` with FILE:LINE."""
    mapping = check_section(cls, data, source, prefix)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in config_fields(cls):
        keys = (*prefix, f.name)
        if f.name not in mapping:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise source.error(keys, "required field is missing")
            continue
        value = mapping[f.name]
        section = _section_type(hints.get(f.name, Any))
        if section is not None and (isinstance(value, Mapping) or value is None and section is hints[f.name]):
            value = build(section, value, source, keys)
        values[f.name] = value
    try:
        return cls(**values)
    except ConfigError as exc:
        where = source.where(prefix)
        message = str(exc)
        if where and not message.startswith(str(source.path)):
            message = f"{where}: {'.'.join(prefix) + ': ' if prefix else ''}{message}"
        raise ConfigError(message, hint=exc.hint) from None
