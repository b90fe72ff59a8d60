"""Labelled equivalence pairs made from BFCL items the project does not ship as tasks.

Each pair is (offered functions, question, the expert's calls, a candidate reply, a label). The expert's
calls are BFCL's ground truth for an item of the ``exec_*`` categories (kept in ``bfcl_eval``'s
``unused_datasets``) or one call of a ``multi_turn_composite`` item (likewise unused), read with Python's
``ast`` here, independently of the plugin's parser. The candidate is the expert's calls after one
transformation, and the **label comes from the transformation alone** (:data:`LABELS`), never from the
verifier: reordering arguments or parallel calls, an int for a float, ``2.0`` or ``2e1`` for an integer,
an explicit default, leaving out an argument equal to its default, padding a string with spaces, python
call syntax are equivalent; a changed value, a numeric or boolean value written as a string, a dropped
required argument, an extra or a dropped call, another function, leaving out a non-default argument,
removing punctuation from a string, full-width letters, and swapping values between parallel calls are
not. Transformations that would not change the call (nothing to reorder, no default) produce no pair.

Used by ``tests/test_tooluse_pairs.py`` (agreement >= 98 %) and ``benchmarks/tooluse_verifier.py``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.types import ToolCall
from pivotgym.verify import param_default
from pivotgym_tooluse import bfcl

#: transformation -> is the candidate equivalent to the expert's calls? (the label of every pair)
LABELS: dict[str, bool] = {
    "reorder_args": True,
    "reorder_calls": True,
    "int_for_float": True,
    "integral_float_for_int": True,
    "numeric_form": True,
    "explicit_default": True,
    "omit_default": True,
    "pad_whitespace": True,
    "python_syntax": True,
    "perturb_value": False,
    "string_for_number": False,
    "string_for_bool": False,
    "drop_required": False,
    "extra_call": False,
    "drop_call": False,
    "wrong_function": False,
    "omit_nondefault": False,
    "strip_punctuation": False,
    "fullwidth": False,
    "swap_parallel_values": False,
}
EXEC_CATEGORIES = ("exec_simple", "exec_multiple", "exec_parallel", "exec_parallel_multiple")
_ABSENT = object()


@dataclass
class Pair:
    """One labelled case: judge ``candidate`` against ``expert`` given ``functions`` (BFCL docs)."""

    item: str
    transform: str
    label: bool
    functions: list[dict[str, Any]]
    question: list[dict[str, Any]]
    expert: list[ToolCall]
    candidate: str
    detail: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ BFCL items
def _unused(kind: str, category: str) -> list[dict[str, Any]]:
    path = bfcl.data_dir() / "unused_datasets" / kind / f"BFCL_v4_{category}.json"
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def read_call(source: str) -> ToolCall | None:
    """A ground-truth call written in python syntax; None unless every argument is a keyword literal."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or node.args:
            return None
        name = ast.unparse(node.func)
        return ToolCall(name, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg})
    except (SyntaxError, ValueError, TypeError):
        return None


def exec_items() -> Iterator[tuple[str, list[dict], list[dict], list[ToolCall]]]:
    """``(id, functions, question, expert calls)`` of every readable ``exec_*`` item."""
    for category in EXEC_CATEGORIES:
        answers = {a["id"]: a["ground_truth"] for a in _unused("possible_answer", category)}
        for entry in _unused("question", category):
            calls = [read_call(s) for s in answers.get(entry["id"], [])]
            if calls and all(calls):
                yield entry["id"], entry["function"], entry["question"][0], calls  # type: ignore[misc]


def composite_items(limit: int = 150) -> Iterator[tuple[str, list[dict], list[dict], list[ToolCall]]]:
    """Single calls of ``multi_turn_composite`` items (simulator functions, many with defaults)."""
    docs = bfcl.multi_turn_docs()
    answers = {a["id"]: a["ground_truth"] for a in _unused("possible_answer", "multi_turn_composite")}
    seen: set[str] = set()
    for entry in _unused("question", "multi_turn_composite"):
        functions = [d for cls in entry["involved_classes"] for d in docs.get(cls, ())]
        question = [m for turn in entry["question"] for m in turn][:1]
        for turn in answers.get(entry["id"], []):
            for source in turn:
                call = read_call(source)
                key = source.replace(" ", "")
                if call is None or key in seen or not any(f["name"] == call.name for f in functions):
                    continue
                seen.add(key)
                yield f"{entry['id']}:{call.name}", functions, question, [call]
                if len(seen) >= limit:
                    return


#: BFCL categories the project ships as tasks, used only for a second, held-out set of pairs
SHIPPED_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)


def shipped_items(limit: int = 400) -> Iterator[tuple[str, list[dict], list[dict], list[ToolCall]]]:
    """Items of the shipped categories with an expert call made from BFCL's answer lists: each parameter
    at its first acceptable value, left out where BFCL's first choice is to leave it out (``""``). Every
    ``limit``-th share of each category, so the set spans them all."""
    for category in SHIPPED_CATEGORIES:
        entries = bfcl.load_category(category)
        step = max(1, len(entries) * len(SHIPPED_CATEGORIES) // limit)
        for entry in entries[::step]:
            calls = []
            for answer in entry.get("answers") or []:
                for name, params in answer.items():
                    args = {}
                    for param, accepted in params.items():
                        accepted = accepted if isinstance(accepted, list) else [accepted]
                        if accepted and accepted[0] != "" and not isinstance(accepted[0], dict):
                            args[param] = accepted[0]
                    calls.append(ToolCall(name, args))
            if calls:
                yield entry["id"], list(entry["function"]), list(entry["question"][0]), calls


# ------------------------------------------------------------------------------------------ rendering
def tagged(calls: Sequence[ToolCall], arguments_json: Sequence[str] | None = None) -> str:
    """``<tool_call>`` blocks; ``arguments_json`` overrides the arguments' JSON text (numeric forms)."""
    blocks = []
    for i, call in enumerate(calls):
        args = arguments_json[i] if arguments_json else json.dumps(call.arguments, ensure_ascii=False)
        blocks.append(f'<tool_call>{{"name": {json.dumps(call.name)}, "arguments": {args}}}</tool_call>')
    return "\n".join(blocks)


def _spec(functions: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    fn = next((f for f in functions if f["name"] == name), {})
    return dict(fn.get("parameters") or {})


def _ptype(spec: Mapping[str, Any], param: str) -> str:
    return str(((spec.get("properties") or {}).get(param) or {}).get("type", "")).lower()


def _default(spec: Mapping[str, Any], param: str) -> Any:
    """The schema default in the parameter's type (a boolean's ``"false"`` is ``False``), or ``_ABSENT``."""
    pspec = (spec.get("properties") or {}).get(param) or {}
    found, value = param_default({k: v for k, v in pspec.items() if k != "description"})
    return value if found else _ABSENT


def _same(a: Any, b: Any) -> bool:
    """Plain-Python equality with booleans apart (the generator's own notion, not the verifier's)."""
    return (
        type(a) is type(b)
        and a == b
        or (
            not isinstance(a, bool)
            and not isinstance(b, bool)
            and isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and a == b
        )
    )


def _perturb(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([1, 2, 3, -1]) if value else 5
    if isinstance(value, float):
        return round(value * 1.5 + 0.25, 6)
    if isinstance(value, str):
        return value + " " + rng.choice(["extra", "north", "2"]) if value else "x"
    if isinstance(value, list):
        return value[:-1] if value else [1]
    if isinstance(value, dict):
        return {**value, "extra_key": 1}
    return "changed"


_FULLWIDTH = {c: chr(ord(c) + 0xFEE0) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"}


# ------------------------------------------------------------------------------------------ pairs
def _transforms(
    functions: list[dict], calls: list[ToolCall], rng: random.Random
) -> Iterator[tuple[str, list | str, str]]:
    """``(transform, candidate calls or text, detail)`` for every transformation that applies."""
    first = calls[0]
    spec = _spec(functions, first.name)
    params = list(first.arguments)
    required = set(spec.get("required") or [])

    def with_args(args: dict) -> list[ToolCall]:
        return [ToolCall(first.name, args), *calls[1:]]

    if len(params) >= 2:
        yield "reorder_args", with_args(dict(reversed(list(first.arguments.items())))), ""
    if len(calls) >= 2 and any(not _same(c.arguments, calls[0].arguments) or c.name != calls[0].name for c in calls):
        yield "reorder_calls", list(reversed(calls)), ""
    yield (
        "python_syntax",
        "["
        + ", ".join(f"{c.name}(" + ", ".join(f"{k}={v!r}" for k, v in c.arguments.items()) + ")" for c in calls)
        + "]",
        "",
    )
    for p in params:
        v, t = first.arguments[p], _ptype(spec, p)
        if t == "float" and isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
            yield "int_for_float", with_args({**first.arguments, p: int(v)}), p
        elif t == "float" and isinstance(v, int) and not isinstance(v, bool):
            yield "int_for_float", with_args({**first.arguments, p: float(v)}), p
        if t == "integer" and isinstance(v, int) and not isinstance(v, bool):
            yield "integral_float_for_int", with_args({**first.arguments, p: float(v)}), p
            text = json.dumps({k: (f"__NUM__{k}" if k == p else x) for k, x in first.arguments.items()})
            form = f"{v}e0" if v >= 0 else f"-{abs(v)}e0"
            yield (
                "numeric_form",
                tagged(calls, [text.replace(f'"__NUM__{p}"', form), *(json.dumps(c.arguments) for c in calls[1:])]),
                p,
            )
        if t in ("integer", "float") and isinstance(v, (int, float)) and not isinstance(v, bool):
            yield "string_for_number", with_args({**first.arguments, p: str(v)}), p
        if t == "boolean" and isinstance(v, bool):
            yield "string_for_bool", with_args({**first.arguments, p: str(v).lower()}), p
        if isinstance(v, str) and v and v == v.strip():
            yield "pad_whitespace", with_args({**first.arguments, p: f"  {v} "}), p
            stripped = "".join(ch for ch in v if ch not in "_-./,")
            if stripped != v and stripped:
                yield "strip_punctuation", with_args({**first.arguments, p: stripped}), p
            wide = "".join(_FULLWIDTH.get(ch, ch) for ch in v)
            if wide != v:
                yield "fullwidth", with_args({**first.arguments, p: wide}), p
        default = _default(spec, p)
        if default is not _ABSENT and _same(v, default):
            yield "omit_default", with_args({k: x for k, x in first.arguments.items() if k != p}), p
        elif p not in required and default is not _ABSENT:
            yield "omit_nondefault", with_args({k: x for k, x in first.arguments.items() if k != p}), p
        if p in required and default is _ABSENT:
            yield "drop_required", with_args({k: x for k, x in first.arguments.items() if k != p}), p
    for p, pspec in (spec.get("properties") or {}).items():
        if p not in first.arguments and isinstance(pspec, Mapping) and "default" in pspec:
            yield "explicit_default", with_args({**first.arguments, p: _default(spec, p)}), p
    if params:
        p = rng.choice(params)
        new = _perturb(first.arguments[p], rng)
        if not _same(new, first.arguments[p]):
            yield "perturb_value", with_args({**first.arguments, p: new}), p
    yield "extra_call", [*calls, calls[0]], ""
    if len(calls) >= 2:
        yield "drop_call", calls[:-1], ""
    others = [f["name"] for f in functions if f["name"] != first.name]
    if others:
        yield "wrong_function", [ToolCall(rng.choice(others), dict(first.arguments)), *calls[1:]], ""
    twins = [c for c in calls[1:] if c.name == first.name]
    for p in params:
        twin = next((c for c in twins if p in c.arguments and not _same(c.arguments[p], first.arguments[p])), None)
        if twin is not None:
            i = calls.index(twin)
            swapped = list(calls)
            swapped[0] = ToolCall(first.name, {**first.arguments, p: twin.arguments[p]})
            swapped[i] = ToolCall(twin.name, {**twin.arguments, p: first.arguments[p]})
            if not all(
                _same(a.arguments, b.arguments) for a, b in zip(sorted(swapped, key=_key), sorted(calls, key=_key))
            ):
                yield "swap_parallel_values", swapped, p
            break


def _key(call: ToolCall) -> str:
    return call.name + json.dumps(call.arguments, sort_keys=True, default=str)


def generate(limit_composite: int = 150, source: str = "unshipped") -> list[Pair]:
    """Every pair, deterministically (each item seeds its own RNG from its id). ``source``:
    ``"unshipped"`` (``exec_*`` and ``multi_turn_composite`` items, the main set) or ``"shipped"`` (the
    project's own categories, a second set the verifier was never tuned on)."""
    out = []
    if source == "unshipped":
        items = [*exec_items(), *composite_items(limit_composite)]
    elif source == "shipped":
        items = list(shipped_items())
    else:
        raise ValueError(f"source must be 'unshipped' or 'shipped', got {source!r}")
    for item_id, functions, question, calls in items:
        rng = random.Random(int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16))
        for transform, candidate, detail in _transforms(functions, calls, rng):
            text = candidate if isinstance(candidate, str) else tagged(candidate)
            if text == tagged(calls):
                continue  # the transformation changed nothing
            if any(isinstance(v, float) and not math.isfinite(v) for c in calls for v in c.arguments.values()):
                continue
            out.append(Pair(item_id, transform, LABELS[transform], functions, question, calls, text, detail))
    return out


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def context_for(pair: Pair, env_id: str = "tooluse/bfcl-simple-v0", env_factory: Any = None) -> Any:
    """The pair's turn as a :class:`~pivotgym.verify.VerifyContext` built through the public API: only
    the functions, the question and the expert's calls, no task id."""
    from pivotgym.verify import VerifyContext

    return VerifyContext.from_turn(env_id, pair.question, pair.expert, tools=pair.functions, env_factory=env_factory)
