"""Regenerate the config-field tables of docs/training.md from the config dataclasses.

    python scripts/gen_config_docs.py            # rewrite the section in place
    python scripts/gen_config_docs.py --check    # exit 1 when the section is stale (what the test checks)

Only the text between ``<!-- config-table:start -->`` and ``<!-- config-table:end -->`` is rewritten. A field's
meaning is its ``#:`` comment in the class body (the Sphinx attribute-comment convention the config modules
already use); its type is the annotation as written and its default the dataclass default. Every field must
have a meaning: a field without one stops the script with the file and field to document.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "training.md"
START = "<!-- config-table:start -->"
END = "<!-- config-table:end -->"

#: (module, class, heading) in the order they appear in the document
SECTIONS = [
    ("pivotgym.train.config", "TrainConfig", "Every trainer"),
    ("pivotgym.train.config", "RLConfig", "`pivot` and `e2e`"),
    ("pivotgym.train.config", "PivotConfig", "`pivotgym train pivot`"),
    ("pivotgym.train.config", "SFTConfig", "`pivotgym train sft`"),
    ("pivotgym.train.config", "E2EConfig", "`pivotgym train e2e`"),
    ("pivotgym.experiment.config", "ExperimentConfig", "`pivotgym experiment CONFIG`"),
    ("pivotgym.experiment.config", "EvalSection", "experiment `eval:`"),
    ("pivotgym.experiment.config", "CurveSection", "experiment `curve:`"),
    ("pivotgym.experiment.config", "ProfileSection", "experiment `profile:`"),
]

#: fields that are not configuration (set by the loader)
SKIP = {("ExperimentConfig", "path")}


class DocError(RuntimeError):
    """The docs cannot be generated (a field without a meaning, missing markers)."""


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _module_file(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def attribute_comments(path: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """``{class: {field: (annotation, meaning)}}`` for the annotated fields of every class in ``path``; the
    meaning is the block of ``#:`` comment lines right above the field ("" when there is none)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, tuple[str, str]] = {}
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                comment: list[str] = []
                row = item.lineno - 2  # the line above, 0-based
                while row >= 0 and lines[row].strip().startswith("#:"):
                    comment.insert(0, lines[row].strip()[2:].strip())
                    row -= 1
                fields[item.target.id] = (ast.unparse(item.annotation), " ".join(comment))
        out[node.name] = fields
    return out


def _markdown(text: str) -> str:
    """reST bits of the comments as Markdown: ``x`` -> `x`, :class:`X` -> `X`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _yaml_value(value: Any) -> str:
    """A default as it would be written in the YAML config."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if e and "." not in mantissa:  # YAML 1.1 (PyYAML) reads 1e-05 as a string, 1.0e-05 as a float
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a section: its fields' defaults
        return _yaml_value(dataclasses.asdict(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, default=str)


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{_yaml_value(f.default)}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{_yaml_value(f.default_factory())}`"
    return "required"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The generated section (without the marker lines)."""
    import importlib

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    comments: dict[str, dict[str, dict[str, tuple[str, str]]]] = {}
    parts = [
        f"<!-- generated by scripts/gen_config_docs.py from "
        f"{', '.join(sorted({_shown(_module_file(m)) for m, _, _ in SECTIONS}))}; "
        f"edit the `#:` comments there, then run `python scripts/gen_config_docs.py` -->"
    ]
    missing: list[str] = []
    for module, name, heading in SECTIONS:
        cls = getattr(importlib.import_module(module), name)
        if module not in comments:
            comments[module] = attribute_comments(_module_file(module))
        own = comments[module].get(name, {})
        rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.name not in own or (name, f.name) in SKIP:
                continue  # inherited: documented in its own class's table
            annotation, meaning = own[f.name]
            if not meaning:
                missing.append(f"{_shown(_module_file(module))}: {name}.{f.name}")
            rows.append(f"| `{f.name}` | `{_cell(annotation)}` | {_cell(_default(f))} | {_cell(_markdown(meaning))} |")
        parts += ["", f"### {heading} (`{name}`)", ""]
        bases = [f"`{base.__name__}`" for base in cls.__mro__[1:] if dataclasses.is_dataclass(base)]
        if bases:
            parts += [f"Also takes every field of {' and '.join(bases)}.", ""]
        parts += rows
    if missing:
        raise DocError(
            f"config field(s) without a meaning: {', '.join(missing)}; add a `#:` comment line above "
            f"each field, then run `python scripts/gen_config_docs.py`"
        )
    return "\n".join(parts) + "\n"


def updated(document: str) -> str:
    """``document`` with the marked section replaced by :func:`render`'s output."""
    if document.count(START) != 1 or document.count(END) != 1 or document.index(START) > document.index(END):
        raise DocError(f"{_shown(DOC)} needs exactly one {START} ... {END} pair of lines")
    head, rest = document.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{render()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/training.md is stale, write nothing")
    args = parser.parse_args(argv)
    try:
        current = DOC.read_text(encoding="utf-8")
        new = updated(current)
    except DocError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if new != current:
            print(f"{_shown(DOC)} is stale: run `python scripts/gen_config_docs.py`", file=sys.stderr)
            return 1
        return 0
    if new != current:
        DOC.write_text(new, encoding="utf-8")
        print(f"updated {_shown(DOC)}")
    else:
        print(f"{_shown(DOC)} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
