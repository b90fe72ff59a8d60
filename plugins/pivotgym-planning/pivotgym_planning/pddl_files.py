"""Reading pddlgym's PDDL files: where they are, and how to clean them for a classical planner.

pddlgym installs ~90 domains as plain files (``<NAME>.pddl`` plus problem folders ``<NAME>/`` and
``<NAME>_test/``). We never import pddlgym (it needs gym); we only read its files.

pddlgym adds *action-literal predicates* to many domains: a comment ``; (:actions pickup stack ...)`` names
them, the domain declares them as predicates and puts one into each action's precondition, and problems list
the allowed ones in ``:init``. They are an artefact of pddlgym's RL interface, not part of the planning
problem, so :func:`strip_action_literals` removes every atom of those predicates from the domain and problem.
"""

from __future__ import annotations

import functools
import re
from importlib.util import find_spec
from pathlib import Path
from typing import Union

SExpr = Union[str, list["SExpr"]]  # noqa: UP007 - a recursive alias: `str | list["SExpr"]` fails at run time

_ACTIONS_COMMENT = re.compile(r";+\s*\(:actions([^)]*)\)", re.IGNORECASE)
_TOKEN = re.compile(r"[()]|[^\s()]+")


class PddlFilesMissing(RuntimeError):
    """pddlgym's data files are not installed."""


@functools.lru_cache(maxsize=1)
def pddl_root() -> Path:
    """The folder holding pddlgym's domain files and problem folders."""
    spec = find_spec("pddlgym")
    if spec is None or not spec.submodule_search_locations:
        raise PddlFilesMissing(
            "pddlgym is not installed; run `pip install --no-deps pddlgym==0.0.7` "
            "(or `make install`, which installs requirements/assets.txt)"
        )
    root = Path(list(spec.submodule_search_locations)[0]) / "pddl"
    if not root.is_dir():
        raise PddlFilesMissing(f"pddlgym is installed but {root} is missing; reinstall pddlgym==0.0.7")
    return root


def domain_file(folder: str) -> Path:
    """The domain file of a problem folder (``blocks_test`` -> ``blocks.pddl``)."""
    name = folder[: -len("_test")] if folder.endswith("_test") else folder
    return pddl_root() / f"{name}.pddl"


def problem_files(folder: str) -> list[Path]:
    """The problem files of a folder, in natural order (``problem2`` before ``problem10``)."""
    path = pddl_root() / folder
    if not path.is_dir():
        return []
    return sorted(path.glob("*.pddl"), key=lambda p: _natural_key(p.stem))


def _natural_key(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


# ---------------------------------------------------------------------------- s-expressions
def parse_sexpr(text: str) -> list[SExpr]:
    """Parse PDDL text (comments removed) into nested lists of lower-cased atoms."""
    text = re.sub(r";[^\n]*", "", text)
    stack: list[list[SExpr]] = [[]]
    for tok in _TOKEN.findall(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise ValueError("unbalanced ')' in PDDL text")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok.lower())
    if len(stack) != 1:
        raise ValueError("unbalanced '(' in PDDL text")
    return stack[0]


def to_text(expr: SExpr, indent: int = 0) -> str:
    """Serialise an s-expression back to PDDL, one top-level section per line."""
    if isinstance(expr, str):
        return expr
    if indent < 2 and any(isinstance(e, list) for e in expr):
        pad = "\n" + "  " * (indent + 1)
        return "(" + pad.join(to_text(e, indent + 1) for e in expr) + ")"
    return "(" + " ".join(to_text(e, indent + 1) for e in expr) + ")"


def action_literal_names(domain_text: str) -> set[str]:
    """The predicate names pddlgym's ``; (:actions ...)`` comment declares as action literals."""
    names: set[str] = set()
    for match in _ACTIONS_COMMENT.finditer(domain_text):
        names.update(n.lower() for n in match.group(1).split())
    return names


def _drop_atoms(expr: SExpr, names: set[str]) -> SExpr:
    """Remove every sub-list whose head is one of ``names`` (and ``(not (name ...))`` wrappers)."""
    if isinstance(expr, str):
        return expr
    kept: list[SExpr] = []
    for item in expr:
        if isinstance(item, list) and item:
            head = item[0]
            if isinstance(head, str) and head in names:
                continue
            if head == "not" and len(item) == 2 and isinstance(item[1], list) and item[1] and item[1][0] in names:
                continue
        kept.append(_drop_atoms(item, names))
    return kept


def strip_action_literals(domain_text: str, problem_text: str) -> tuple[str, str]:
    """Return (domain, problem) PDDL with pddlgym's action-literal predicates removed everywhere."""
    names = action_literal_names(domain_text)
    domain = parse_sexpr(domain_text)
    problem = parse_sexpr(problem_text)
    if len(domain) != 1 or len(problem) != 1:
        raise ValueError("expected exactly one (define ...) form in each PDDL file")
    if names:
        domain = [_drop_atoms(domain[0], names)]
        problem = [_drop_atoms(problem[0], names)]
    for tree in (domain[0], problem[0]):  # VAL rejects names that do not start with a letter ("(problem 0)")
        for section in tree:
            if (
                isinstance(section, list)
                and len(section) == 2
                and section[0] in ("domain", "problem")
                and isinstance(section[1], str)
                and not section[1][:1].isalpha()
            ):
                section[1] = f"p{section[1]}"
    return to_text(domain[0]) + "\n", to_text(problem[0]) + "\n"
