"""Labelled pairs from BFCL items, **labelled by BFCL's answer lists**, to measure the expert-calls-alone verifier.

Each BFCL item gives, per expected call, every parameter's list of acceptable values (``""``: the parameter may
be left out). The expert's call takes each parameter at one acceptable value (the first that is not ``""``);
each candidate changes that call once, and its label is what the answer list says about the result, never what
a verifier says:

* positives: another value from the list (``alt_value``), the value in another case (``case_variant``: BFCL's
  checker folds case), padded with spaces (``pad_whitespace``), an optional parameter left out where the list
  holds ``""`` (``omit_optional``), ``null`` for a parameter whose default is null and whose list holds ``""``
  (``explicit_null``), the default passed explicitly where the list holds it (``explicit_default``);
* negatives: a number, a string (taken from another item) or a boolean not in the list (``perturb_number``,
  ``other_string``, ``flip_bool``), another offered function (``wrong_function``), a required parameter left
  out (``drop_required``), an optional one left out whose list lacks ``""`` (``omit_unlisted``), the first call
  repeated (``extra_call``).

A pair is **decidable from the expert's call alone** unless (``Pair.why`` says which):

* the list accepts a value the expert's call cannot imply: another string beyond case and whitespace (a synonym
  such as ``'LA'``/``'Los Angeles'``), another number or boolean, or leaving out (or nulling) a parameter the
  expert set to a value other than its default;
* the label rests on BFCL's checker where our documented rules deliberately depart from it (the plugin README's
  rules table): case kept for a parameter that is not free text (an enum, an identifier, a path...), an
  explicit ``null`` (BFCL types it as wrong), leaving out a parameter at its default where the list lacks
  ``""`` (even a required one), an explicit default the list does not hold, a number within the relative
  tolerance of 1e-9.

Sources: ``sql`` (BFCL's unused ``sql`` category, with answer lists), ``exec`` (the unused ``exec_*``
categories, whose ground truth is one call per item: every parameter's list is its one value) and ``shipped``
(the python categories the plugin ships; BFCL's data, but categories we ship, kept apart).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pivotgym.types import ToolCall
from pivotgym.verify import folds_case, normalize_whitespace, numbers_equal, param_default, string_kind
from pivotgym_tooluse import bfcl
from pivotgym_tooluse.pairs import EXEC_CATEGORIES, SHIPPED_CATEGORIES, _unused, read_call, tagged

SOURCES = ("sql", "exec", "shipped")
#: transformation -> the label every pair of it carries (checked against the answer list when built)
LABELS: dict[str, bool] = {
    "alt_value": True,
    "case_variant": True,
    "pad_whitespace": True,
    "omit_optional": True,
    "explicit_null": True,
    "explicit_default": True,
    "perturb_number": False,
    "other_string": False,
    "flip_bool": False,
    "wrong_function": False,
    "drop_required": False,
    "omit_unlisted": False,
    "extra_call": False,
}


@dataclass
class Pair:
    """One case: judge ``candidate`` against ``expert`` given ``functions`` (BFCL docs); ``label`` comes from
    BFCL's answer list; ``why`` is empty when the pair is decidable from the expert's call alone."""

    item: str
    category: str
    transform: str
    label: bool
    why: str
    functions: list[dict[str, Any]]
    question: list[dict[str, Any]]
    expert: list[ToolCall]
    candidate: list[ToolCall]
    param: str = ""

    @property
    def decidable(self) -> bool:
        return not self.why

    @property
    def text(self) -> str:
        return tagged(self.candidate)


# ------------------------------------------------------------------------------------------ items
Item = tuple[str, str, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, dict[str, list[Any]]]]]


def items(source: str) -> Iterator[Item]:
    """``(id, category, functions, question, answers)`` of every item of a source; answers in BFCL's format."""
    if source == "sql":
        sql_truth = {a["id"]: a["ground_truth"] for a in _unused("possible_answer", "sql")}
        for entry in _unused("question", "sql"):
            if sql_truth.get(entry["id"]):
                yield entry["id"], "sql", entry["function"], _first_turn(entry["question"]), sql_truth[entry["id"]]
    elif source == "exec":
        for category in EXEC_CATEGORIES:
            truth = {a["id"]: a["ground_truth"] for a in _unused("possible_answer", category)}
            for entry in _unused("question", category):
                calls = [read_call(s) for s in truth.get(entry["id"], [])]
                if calls and all(calls):
                    answers = [{c.name: {k: [v] for k, v in c.arguments.items()}} for c in calls if c]
                    yield entry["id"], category, entry["function"], _first_turn(entry["question"]), answers
    elif source == "shipped":
        for category in SHIPPED_CATEGORIES:
            for entry in bfcl.load_category(category):
                if entry.get("answers"):
                    yield entry["id"], category, entry["function"], _first_turn(entry["question"]), entry["answers"]
    else:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")


def _first_turn(question: Any) -> list[dict[str, Any]]:
    return list(question[0]) if question and isinstance(question[0], list) else list(question)


# ------------------------------------------------------------------------------------------ BFCL's lists
_BFCL_STRIP = re.compile(r"[ ,./\-_*^]")


def bfcl_norm(value: Any) -> Any:
    """A value as BFCL's checker compares it: strings lower-cased without spaces and ``, . / - _ * ^``; numbers
    by value (an int equals a float, a boolean is apart); lists element-wise."""
    if isinstance(value, str):
        return ("s", _BFCL_STRIP.sub("", value).lower())
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", float(value))
    if isinstance(value, (list, tuple)):
        return ("l", tuple(bfcl_norm(v) for v in value))
    return ("o", json.dumps(value, sort_keys=True, default=str))


def listed(value: Any, accepted: Sequence[Any]) -> bool:
    """Is ``value`` in a parameter's answer list by BFCL's comparison (``""`` is leaving out, not a value)?"""
    want = bfcl_norm(value)
    return any(a != "" and bfcl_norm(a) == want for a in accepted)


def _same_beyond_case(a: Any, b: Any) -> bool:
    """Equal up to case, surrounding and repeated whitespace, and numeric form (what an expert's value implies)."""
    if isinstance(a, str) and isinstance(b, str):
        return normalize_whitespace(a).casefold() == normalize_whitespace(b).casefold()
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_beyond_case(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _differs_in_case_only(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return normalize_whitespace(a) != normalize_whitespace(b) and _same_beyond_case(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return any(_differs_in_case_only(x, y) for x, y in zip(a, b)) and _same_beyond_case(a, b)
    return False


# ------------------------------------------------------------------------------------------ pairs
def _spec(functions: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    from pivotgym_tooluse.schemas import to_tool

    fn = next((f for f in functions if f.get("name") == name), None)
    return to_tool(fn)["function"]["parameters"] if fn else {}


def _expert(answers: Sequence[Mapping[str, Mapping[str, Any]]]) -> list[tuple[ToolCall, dict[str, list[Any]]]]:
    out = []
    for entry in answers:
        for name, params in entry.items():
            lists = {p: (a if isinstance(a, list) else [a]) for p, a in params.items()}
            args = {}
            for p, accepted in lists.items():
                value = next((a for a in accepted if a != ""), "")
                if value != "":
                    args[p] = value
            out.append((ToolCall(name, args), lists))
    return out


def _perturb_number(value: Any, accepted: Sequence[Any]) -> Any:
    for candidate in (value + 1, value * 1.5 + 1, value - 7, value * 10 + 3):
        candidate = int(candidate) if isinstance(value, int) and float(candidate).is_integer() else candidate
        if not listed(candidate, accepted):
            return candidate
    return None


def _case_variant(value: str) -> str | None:
    for variant in (value.lower(), value.upper(), value.swapcase()):
        if variant != value:
            return variant
    return None


def _pairs_of_item(item: Item, strings: Sequence[str], rng: random.Random) -> Iterator[Pair]:
    item_id, category, functions, question, answers = item
    calls = _expert(answers)
    if not calls:
        return
    expert = [c for c, _ in calls]
    first, lists = calls[0]
    spec = _spec(functions, first.name)
    props: Mapping[str, Any] = spec.get("properties") or {}
    required = set(spec.get("required") or [])

    def pair(transform: str, label: bool, why: str, args: dict[str, Any] | list[ToolCall], param: str = "") -> Pair:
        cand = args if isinstance(args, list) else [ToolCall(first.name, args), *expert[1:]]
        return Pair(item_id, category, transform, label, why, functions, question, expert, cand, param)

    for p, accepted in lists.items():
        pspec = props.get(p) if isinstance(props.get(p), Mapping) else {}
        has_default, default = param_default(pspec)
        value = first.arguments.get(p)
        if any(isinstance(a, Mapping) for a in accepted):
            continue  # nested answers: only top-level values are transformed
        if p in first.arguments:
            others = [a for a in accepted if a != "" and not _same(a, value)]
            if others:
                alt = others[-1]
                why = ""
                if _differs_in_case_only(alt, value):
                    if not folds_case(p, pspec):
                        why = f"departs: case kept for a {string_kind(p, pspec)} parameter"
                elif not _same_beyond_case(alt, value):
                    why = "not decidable: the list accepts another value (a synonym or another number)"
                yield pair("alt_value", True, why, {**first.arguments, p: alt}, p)
            if isinstance(value, str) and (variant := _case_variant(value)) is not None:
                why = "" if folds_case(p, pspec) else f"departs: case kept for a {string_kind(p, pspec)} parameter"
                yield pair("case_variant", True, why, {**first.arguments, p: variant}, p)
            if isinstance(value, str) and value.strip() == value and value:
                yield pair("pad_whitespace", True, "", {**first.arguments, p: f" {value}  "}, p)
            at_default = has_default and _same(default, value)
            rest = {k: v for k, v in first.arguments.items() if k != p}
            if "" in accepted:
                why = "" if at_default else "not decidable: the list lets out a parameter the expert set"
                yield pair("omit_optional", True, why, rest, p)
            elif p in required:
                why = "departs: a value at its default may be left out" if at_default else ""
                yield pair("drop_required", False, why, rest, p)
            else:
                why = "departs: a value at its default may be left out" if at_default else ""
                yield pair("omit_unlisted", False, why, rest, p)
            if isinstance(value, bool) and not listed(not value, accepted):
                yield pair("flip_bool", False, "", {**first.arguments, p: not value}, p)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                new = _perturb_number(value, accepted)
                if new is not None:
                    why = "departs: within the relative tolerance 1e-9" if numbers_equal(new, value) else ""
                    yield pair("perturb_number", False, why, {**first.arguments, p: new}, p)
            elif isinstance(value, str):
                pool = [s for s in strings if not listed(s, accepted)]
                if pool:
                    yield pair("other_string", False, "", {**first.arguments, p: rng.choice(pool)}, p)
        if "" in accepted and has_default and default is None and p not in required:
            why = "departs: BFCL's checker types an explicit null as wrong"
            if p in first.arguments:
                why = "not decidable: the list lets out a parameter the expert set"
            yield pair("explicit_null", True, why, {**first.arguments, p: None}, p)
        if p not in first.arguments and has_default and default is not None:
            label = listed(default, accepted)
            why = "" if label else "departs: an explicit default is accepted where the list only lets it out"
            yield pair("explicit_default", label, why, {**first.arguments, p: default}, p)
    names = [f["name"] for f in functions if f.get("name") != first.name]
    if names:
        yield pair("wrong_function", False, "", [ToolCall(rng.choice(names), dict(first.arguments)), *expert[1:]])
    yield pair("extra_call", False, "", [*expert, first])


def _same(a: Any, b: Any) -> bool:
    return bfcl_norm(a) == bfcl_norm(b) if not (isinstance(a, str) and isinstance(b, str)) else a == b


def _strings(all_items: Sequence[Item]) -> list[str]:
    """Every top-level string answer of a source (the pool ``other_string`` draws from), sorted for determinism."""
    found = {
        a
        for item in all_items
        for entry in item[4]
        for params in entry.values()
        for accepted in params.values()
        for a in (accepted if isinstance(accepted, list) else [accepted])
        if isinstance(a, str) and a.strip()
    }
    return sorted(found)


def generate(source: str, *, every: int = 1, seed: int = 0) -> list[Pair]:
    """The pairs of a source, deterministically (each item's RNG is seeded from ``seed`` and its id); ``every``
    keeps every ``every``-th item (a fixed sample for fast tests). Items whose values are not finite are skipped."""
    all_items = list(items(source))
    strings = _strings(all_items)
    out = []
    for item in all_items[::every]:
        rng = random.Random(int(hashlib.sha256(f"{seed}:{item[0]}".encode()).hexdigest()[:8], 16))
        for p in _pairs_of_item(item, strings, rng):
            if any(isinstance(v, float) and not math.isfinite(v) for c in p.candidate for v in c.arguments.values()):
                continue
            if p.label is not LABELS[p.transform] and p.transform != "explicit_default":
                raise AssertionError(f"{p.item} {p.transform}: label {p.label} contradicts LABELS")
            out.append(p)
    return out


def context_for(pair: Pair, env_factory: Any = None) -> Any:
    """The pair's turn through the public API only: functions, the question and the expert's calls, no task id."""
    from pivotgym.verify import VerifyContext

    return VerifyContext.from_turn(
        "tooluse/bfcl-simple-v0", pair.question, pair.expert, tools=pair.functions, env_factory=env_factory
    )
