"""One planning problem: its PDDL (cleaned), a lifted STRIPS model for exact step semantics with precise
error messages, a lenient action parser, readable text, and a pyperplan grounding for search.

States are frozensets of ground fact strings in pyperplan's notation (``"(on a b)"``), statics included.
An action is applicable when every precondition atom of its schema holds; applying it removes the delete
effects and then adds the add effects (PDDL semantics, the same as pyperplan's and VAL's).
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from dataclasses import dataclass
from typing import Any

from pivotgym_planning.pddl_files import domain_file, pddl_root, strip_action_literals
from pivotgym_planning.search import SearchTask

State = frozenset


class ActionError(ValueError):
    """A candidate action that cannot be executed; the message says what is wrong and how to fix it.

    ``code`` is ``"unparseable"``, ``"unknown_action"``, ``"bad_arguments"`` or ``"precondition"``.
    """

    def __init__(self, message: str, code: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Atom:
    """A lifted atom: predicate name and argument terms (``?variables`` or constants)."""

    predicate: str
    terms: tuple[str, ...]

    def ground(self, binding: dict[str, str]) -> str:
        return fact(self.predicate, [binding.get(t, t) for t in self.terms])


@dataclass(frozen=True)
class Schema:
    """An action schema: typed parameters, positive preconditions, add and delete effects."""

    name: str
    params: tuple[tuple[str, tuple[str, ...]], ...]
    pre: tuple[Atom, ...]
    add: tuple[Atom, ...]
    delete: tuple[Atom, ...]

    def signature(self) -> str:
        """``stack ?x - block ?y - block`` style text for the prompt."""
        parts = [self.name]
        for var, types in self.params:
            parts.append(var if types == ("object",) else f"{var} - {'/'.join(types)}")
        return " ".join(parts)


@dataclass(frozen=True)
class GroundAction:
    """A grounded action: schema name, object arguments and its ground pre/add/delete facts."""

    name: str
    args: tuple[str, ...]
    pre: tuple[str, ...]
    add: frozenset[str]
    delete: frozenset[str]

    @property
    def text(self) -> str:
        """Canonical PDDL text, e.g. ``(unstack b a robot)`` (what the expert emits and VAL reads)."""
        return fact(self.name, self.args)


def fact(predicate: str, args) -> str:
    return f"({predicate}{' ' + ' '.join(args) if len(args) else ''})"


def _pyperplan_parse(domain_text: str, problem_text: str) -> Any:
    from pyperplan.pddl.parser import Parser

    parser = Parser(None)
    parser.domInput = domain_text
    domain = parser.parse_domain(read_from_file=False)
    parser.probInput = problem_text
    return parser.parse_problem(domain, read_from_file=False)


class PlanningProblem:
    """A pddlgym problem file, cleaned and modelled. Build with :func:`load_problem` (cached), or from PDDL
    text with :func:`problem_from_text` (generated problems; cached too).

    ``problem_text`` given: the problem is read from it instead of ``folder/filename``, with the domain of
    ``folder`` (its pddlgym domain file) and ``key`` as its identity (the per-problem caches of plans and h*
    are keyed by it, so it must name this exact text).
    """

    def __init__(self, folder: str, filename: str, *, problem_text: str | None = None, key: str | None = None) -> None:
        self.folder = folder
        self.filename = filename
        self.key = key or f"{folder}/{filename.removesuffix('.pddl')}"
        dom_path = domain_file(folder)
        raw_problem = problem_text if problem_text is not None else (pddl_root() / folder / filename).read_text()
        self.domain_text, self.problem_text = strip_action_literals(dom_path.read_text(), raw_problem)
        problem = _pyperplan_parse(self.domain_text, self.problem_text)
        self._pyperplan_problem = problem
        domain = problem.domain
        self.domain_name: str = domain.name
        self.parents: dict[str, str | None] = {
            name: (t.parent.name if t.parent is not None else None) for name, t in domain.types.items()
        }
        objects = dict(domain.constants or {})
        objects.update(problem.objects)
        self.objects: dict[str, str] = {name: t.name for name, t in objects.items()}
        self.schemas: dict[str, Schema] = {}
        for name, action in domain.actions.items():
            self.schemas[name] = Schema(
                name=name,
                params=tuple((var, tuple(t.name for t in types)) for var, types in action.signature),
                pre=tuple(_atom(p) for p in action.precondition),
                add=tuple(_atom(p) for p in action.effect.addlist),
                delete=tuple(_atom(p) for p in action.effect.dellist),
            )
        changing = {a.predicate for s in self.schemas.values() for a in (*s.add, *s.delete)}
        self.static_predicates = set(domain.predicates) - changing
        self.init: State = frozenset(fact(a.name, [n for n, _t in a.signature]) for a in problem.initial_state)
        self.goal: frozenset[str] = frozenset(fact(a.name, [n for n, _t in a.signature]) for a in problem.goal)
        self._lock = threading.Lock()
        self._search: SearchTask | None = None

    # ---------------------------------------------------------------- types and grounding
    def is_a(self, obj: str, types: tuple[str, ...]) -> bool:
        """Whether object ``obj`` has one of ``types`` (or a subtype of one)."""
        t: str | None = self.objects.get(obj)
        seen = set()
        while t is not None and t not in seen:
            if t in types or "object" in types:
                return True
            seen.add(t)
            t = self.parents.get(t)
        return False

    def ground(self, name: str, args: tuple[str, ...]) -> GroundAction:
        """Ground schema ``name`` with ``args``; :class:`ActionError` for unknown names, arity or types."""
        schema = self.schemas.get(name)
        if schema is None:
            raise ActionError(
                f"unknown action {name!r}; actions are: {', '.join(sorted(self.schemas))}.", "unknown_action", name=name
            )
        if len(args) != len(schema.params):
            raise ActionError(
                f"{name} takes {len(schema.params)} argument(s) ({schema.signature()}), "
                f"got {len(args)}: {fact(name, args)}.",
                "bad_arguments",
            )
        for arg, (var, types) in zip(args, schema.params):
            if arg not in self.objects:
                raise ActionError(
                    f"unknown object {arg!r} in {fact(name, args)}; objects are: {' '.join(sorted(self.objects))}.",
                    "bad_arguments",
                    object=arg,
                )
            if not self.is_a(arg, types):
                raise ActionError(
                    f"{arg} is a {self.objects[arg]}, but {var} of {name} must be a {' or '.join(types)}.",
                    "bad_arguments",
                    object=arg,
                )
        binding = {var: arg for (var, _t), arg in zip(schema.params, args)}
        return GroundAction(
            name=name,
            args=tuple(args),
            pre=tuple(a.ground(binding) for a in schema.pre),
            add=frozenset(a.ground(binding) for a in schema.add),
            delete=frozenset(a.ground(binding) for a in schema.delete),
        )

    def unsatisfied(self, state: State, action: GroundAction) -> list[str]:
        """The preconditions of ``action`` that are false in ``state`` (empty: applicable)."""
        return [p for p in action.pre if p not in state]

    def apply(self, state: State, action: GroundAction) -> State:
        """The successor state; raises :class:`ActionError` naming the failed preconditions (VAL style)."""
        missing = self.unsatisfied(state, action)
        if missing:
            advice = "; ".join(f"{p} is false" for p in missing)
            raise ActionError(
                f"{action.text} is not applicable: precondition {advice}. "
                f"Choose an action whose preconditions hold in the current state.",
                "precondition",
                missing=missing,
            )
        return frozenset((state - action.delete) | action.add)

    def goal_reached(self, state: State) -> bool:
        return self.goal <= state

    def applicable(self, state: State) -> list[GroundAction]:
        """Every applicable ground action in ``state``, sorted by text (enumerated lazily per schema)."""
        out = []
        for schema in self.schemas.values():
            domains = [[o for o in sorted(self.objects) if self.is_a(o, types)] for _v, types in schema.params]
            for args in itertools.product(*domains):
                binding = {var: arg for (var, _t), arg in zip(schema.params, args)}
                if all(a.ground(binding) in state for a in schema.pre):
                    out.append(self.ground(schema.name, tuple(args)))
        return sorted(out, key=lambda a: a.text)

    # ---------------------------------------------------------------- parsing
    def parse(self, text: str, state: State | None = None) -> GroundAction:
        """Read one action from free text, leniently.

        Accepts ``(unstack b a robot)``, ``unstack(b, a, robot)``, ``Unstack B A robot``, surrounding words
        and code fences, ``_`` for ``-`` in names. When trailing arguments are left out and ``state`` is
        given, they are filled in if exactly one completion is applicable (``(unstack b a)`` with one robot).

        A reply is one action: if it names two or more *different* actions (by a known action name), it is
        rejected as ``multiple_actions`` rather than judged by its first, since the episode executes one
        action per turn and crediting a guess among several would reward hedging. Words in parentheses
        that are not action names (facts such as ``(on a b)``) do not count. Replies longer than
        ``MAX_REPLY_CHARS`` are rejected as ``too_long`` (never silently cut).
        """
        if not isinstance(text, str):
            raise ActionError("an action must be text.", "unparseable")
        if len(text) > MAX_REPLY_CHARS:
            raise ActionError(
                f"the reply has {len(text)} characters; reply with one action in PDDL form "
                f"(at most {MAX_REPLY_CHARS} characters), e.g. {self.example_action()}.",
                "too_long",
            )
        candidates, prose = _candidate_calls(text)
        if not candidates:
            raise ActionError(
                f"no action found; reply with one action in PDDL form, e.g. {self.example_action()}.", "unparseable"
            )
        recognised: list[tuple[str, tuple[str, ...]]] = []
        for name, args in candidates:
            schema_name = self._schema_name(name)
            if schema_name is None:
                continue
            reading = (schema_name, tuple(self._object_name(a) for a in args))
            if reading not in recognised:
                recognised.append(reading)
            if prose:  # alternative readings of one sentence: the first that names an action
                break
        if not recognised:
            name = candidates[0][0]
            raise ActionError(
                f"unknown action {name!r}; actions are: {', '.join(sorted(self.schemas))}. "
                f"Example: {self.example_action()}.",
                "unknown_action",
                name=name,
            )
        if len(recognised) > 1:
            shown = ", ".join(fact(n, a) for n, a in recognised[:4])
            raise ActionError(
                f"the reply names {len(recognised)} different actions ({shown}"
                f"{', ...' if len(recognised) > 4 else ''}); reply with exactly one action per "
                f"turn.",
                "multiple_actions",
                count=len(recognised),
            )
        schema_name, args = recognised[0]
        schema = self.schemas[schema_name]
        if state is not None and len(args) < len(schema.params):
            return self._complete(schema, args, state)
        return self.ground(schema_name, args)

    def _schema_name(self, name: str) -> str | None:
        name = name.lower()
        if name in self.schemas:
            return name
        loose = {re.sub(r"[-_]", "", s): s for s in self.schemas}
        return loose.get(re.sub(r"[-_]", "", name))

    def _object_name(self, arg: str) -> str:
        arg = arg.lower()
        if arg in self.objects:
            return arg
        alt = arg.replace("_", "-")
        return alt if alt in self.objects else arg

    def _complete(self, schema: Schema, given: tuple[str, ...], state: State) -> GroundAction:
        for arg in given:  # report unknown objects before trying completions
            if arg not in self.objects:
                raise ActionError(
                    f"unknown object {arg!r}; objects are: {' '.join(sorted(self.objects))}.",
                    "bad_arguments",
                    object=arg,
                )
        rest = schema.params[len(given) :]
        domains = [[o for o in sorted(self.objects) if self.is_a(o, types)] for _v, types in rest]
        typed: list[GroundAction] = []
        for tail in itertools.islice(itertools.product(*domains), 2001):
            try:
                typed.append(self.ground(schema.name, given + tuple(tail)))
            except ActionError:
                continue
        if len(typed) > 2000:  # too open-ended to guess: ask for every argument
            typed = []
        applicable = [a for a in typed if not self.unsatisfied(state, a)]
        if len(applicable) == 1:
            return applicable[0]
        if len(typed) == 1:  # the only possible completion: let apply() name the failed precondition
            return typed[0]
        raise ActionError(
            f"{schema.name} takes {len(schema.params)} argument(s) ({schema.signature()}), got "
            f"{len(given)}: {fact(schema.name, given)}; write all of them.",
            "bad_arguments",
        )

    def example_action(self) -> str:
        """A well-formed (not necessarily applicable) action of this problem, for format hints."""
        schema = next(iter(self.schemas.values()))
        args = []
        for var, types in schema.params:
            fits = [o for o in sorted(self.objects) if self.is_a(o, types)]
            args.append(fits[0] if fits else var.lstrip("?"))
        return fact(schema.name, args)

    # ---------------------------------------------------------------- text for the agent
    def describe_state(self, state: State) -> str:
        """The non-static facts of ``state``, sorted, on one line."""
        return " ".join(sorted(f for f in state if _pred(f) not in self.static_predicates)) or "(nothing)"

    def describe_statics(self) -> str:
        return " ".join(sorted(f for f in self.init if _pred(f) in self.static_predicates))

    def describe_goal(self) -> str:
        return " ".join(sorted(self.goal))

    # ---------------------------------------------------------------- search
    def search_task(self) -> SearchTask:
        """The pyperplan grounding (statics folded in, irrelevant operators pruned), built once."""
        with self._lock:
            if self._search is None:
                from pyperplan.grounding import ground

                self._search = SearchTask(ground(_pyperplan_parse(self.domain_text, self.problem_text)))
            return self._search


def _atom(predicate: Any) -> Atom:
    return Atom(predicate.name, tuple(name for name, _types in predicate.signature))


def _pred(fact_text: str) -> str:
    return fact_text[1:-1].split(" ", 1)[0]


_SEXPR = re.compile(r"\(\s*([A-Za-z][\w-]*)((?:\s+[\w-]+)*)\s*\)")
_CALL = re.compile(r"(?<![\w-])([A-Za-z][\w-]*)\s*\(([^()]*)\)")
_WORDS = re.compile(r"[A-Za-z][\w-]*")


#: the longest reply read as an action (a reply is one action, a few dozen characters)
MAX_REPLY_CHARS = 20_000


def _candidate_calls(text: str) -> tuple[list[tuple[str, tuple[str, ...]]], bool]:
    """Possible (name, args) readings of ``text`` in text order, and whether they are alternative readings
    of plain words (no parenthesised form found)."""
    text = text.replace("`", " ")
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for m in _SEXPR.finditer(text):
        found.append((m.start(), m.group(1), tuple(m.group(2).split())))
    for m in _CALL.finditer(text):
        args = tuple(a.strip().strip("'\"") for a in m.group(2).replace(",", " ").split() if a.strip())
        found.append((m.start(), m.group(1), args))
    found.sort(key=lambda t: t[0])
    calls = [(name, args) for _pos, name, args in found]
    if calls:
        return calls, False
    words = _WORDS.findall(text)
    if words and len(words) <= 12:
        calls.append((words[0], tuple(words[1:])))
        if len(words) > 1:  # "pick up a" for pick-up
            calls.append((f"{words[0]}-{words[1]}", tuple(words[2:])))
    return calls, True


@functools.lru_cache(maxsize=512)
def load_problem(folder: str, filename: str) -> PlanningProblem:
    """The problem ``folder/filename`` of pddlgym, parsed once per process."""
    return PlanningProblem(folder, filename)


@functools.lru_cache(maxsize=4096)
def problem_from_text(folder: str, problem_text: str) -> PlanningProblem:
    """A problem given as PDDL text (e.g. generated) over the domain of pddlgym folder ``folder``, parsed once
    per process. Its key is ``generated/`` plus a hash of the text, so equal texts share caches and different
    texts never do."""
    import hashlib

    digest = hashlib.sha256(problem_text.encode()).hexdigest()[:16]
    return PlanningProblem(folder, "generated.pddl", problem_text=problem_text, key=f"generated/{folder}/{digest}")
