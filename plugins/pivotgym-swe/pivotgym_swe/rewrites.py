"""Candidate fixes of known status, for measuring a verifier: equivalent rewrites, plausible wrong fixes, forgeries.

Everything here edits one function of a module's source and returns the new module text:

* :func:`equivalent_rewrites`: the reference function rewritten by semantics-preserving AST transforms (rename
  locals, swap ``if``/``else`` under a negated test, extract a subexpression into a variable, De Morgan on a
  branch test, ``if``/``else`` returns into a conditional expression, an appending ``for`` loop into a list
  comprehension and back). Correct **by construction**: each transform is applied only where its conditions
  hold (no ``locals()``/``eval``, fresh names, loop variables unused elsewhere...).
* :func:`wrong_fixes`: the task's original bug and the other single mutations of :mod:`pivotgym_swe.mutate`
  applied to the reference function. The original bug is wrong by construction (its FAIL_TO_PASS tests fail);
  the others are *plausibly* wrong and must be labelled by a method of their own (see
  ``benchmarks/swe_verifier_agreement.py``), since a mutant can be equivalent.
* :func:`always_equal`: the function's body replaced by one returning an object equal to everything (a
  forgery, wrong by construction), written inside the function so that a static patch check that refuses new
  module-level code does not see it.
"""

from __future__ import annotations

import ast
import copy
import random
from collections.abc import Callable, Iterator

from pivotgym_swe.mutate import Mutation, candidate_mutations

FORBIDDEN_CALLS = frozenset({"locals", "vars", "eval", "exec", "globals", "dir"})


# ---------------------------------------------------------------------------------------------- splicing
def find_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The module-level function ``name`` of a parsed module (None when there is none)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def splice(text: str, name: str, function: ast.FunctionDef) -> str:
    """``text`` with the module-level function ``name`` (decorators included) replaced by ``function``."""
    tree = ast.parse(text)
    old = find_function(tree, name)
    if old is None or old.end_lineno is None:
        raise ValueError(f"no module-level function {name!r}")
    start = min([old.lineno, *(d.lineno for d in old.decorator_list)])
    lines = text.splitlines(keepends=True)
    new = ast.unparse(ast.fix_missing_locations(function)) + "\n"
    return "".join(lines[: start - 1]) + new + "".join(lines[old.end_lineno :])


def always_equal(text: str, name: str) -> str:
    """``text`` with the body of ``name`` (after its docstring) returning an object that equals everything."""
    tree = ast.parse(text)
    fn = find_function(tree, name)
    if fn is None:
        raise ValueError(f"no module-level function {name!r}")
    forged = ast.parse(
        "class _AlwaysEqual:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = object.__hash__\n"
    ).body
    forged.append(ast.Return(ast.Call(ast.Name("_AlwaysEqual", ast.Load()), [], [])))
    doc = fn.body[:1] if ast.get_docstring(fn) is not None else []
    fn = copy.deepcopy(fn)
    fn.body = [*doc, *forged]
    return splice(text, name, fn)


# ---------------------------------------------------------------------------------------------- transforms
def _assigned_names(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def _all_names(fn: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            out.add(node.name)
    return out


def _other_bindings(fn: ast.FunctionDef) -> set[str]:
    """Names bound by something other than an ``ast.Name`` (nested parameters, ``except ... as``, imports,
    nested definitions, ``match`` captures): renaming only the ``Name`` nodes would split such a binding."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            out.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
    return out


def _safe(fn: ast.FunctionDef) -> bool:
    """No ``locals()``/``eval``-style introspection and no ``global``/``nonlocal``: renaming cannot be observed."""
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            return False
    return True


def _fresh(fn: ast.AST, stem: str) -> str:
    taken = _all_names(fn)
    i = 0
    while f"{stem}{i}" in taken:
        i += 1
    return f"{stem}{i}"


def rename_locals(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """Every local variable (assigned in the body, not a parameter) renamed to a fresh name, everywhere in the
    function (nested scopes included: they see the same binding, or shadow it under the same new name)."""
    if not _safe(fn):
        return
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    local = sorted(_assigned_names(fn) - params - _other_bindings(fn))
    if not local:
        return
    new = copy.deepcopy(fn)
    mapping = {}
    for name in local:
        mapping[name] = _fresh(new, f"{name}_r")
        for node in ast.walk(new):
            if isinstance(node, ast.Name) and node.id == name:
                node.id = mapping[name]
    yield new


def swap_if_else(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """``if c: A else: B`` -> ``if not (c): B else: A``, for each such statement (one per variant)."""
    sites = [n for n in ast.walk(fn) if isinstance(n, ast.If) and n.orelse]
    for i in range(len(sites)):
        new = copy.deepcopy(fn)
        node = [n for n in ast.walk(new) if isinstance(n, ast.If) and n.orelse][i]
        node.test = ast.UnaryOp(ast.Not(), node.test)
        node.body, node.orelse = node.orelse, node.body
        yield new


def demorgan(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """An ``if`` or ``while`` test ``a and b`` -> ``not (not a or not b)`` (and ``or`` likewise): the same truth
    tests of the same operands, in the same order, in a boolean context."""
    sites = [n for n in ast.walk(fn) if isinstance(n, (ast.If, ast.While)) and isinstance(n.test, ast.BoolOp)]
    for i in range(len(sites)):
        new = copy.deepcopy(fn)
        node = [n for n in ast.walk(new) if isinstance(n, (ast.If, ast.While)) and isinstance(n.test, ast.BoolOp)][i]
        test = node.test
        assert isinstance(test, ast.BoolOp)
        other: ast.boolop = ast.Or() if isinstance(test.op, ast.And) else ast.And()
        node.test = ast.UnaryOp(ast.Not(), ast.BoolOp(other, [ast.UnaryOp(ast.Not(), v) for v in test.values]))
        yield new


def _statement_lists(root: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(root):
        for attr in ("body", "orelse", "finalbody"):
            value = getattr(node, attr, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                yield handler.body


def extract_variable(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """``return expr`` / ``if expr:`` -> ``v = expr`` just before it, then ``return v`` / ``if v:`` (the
    expression is evaluated first by both statements, so nothing moves relative to anything else)."""

    def sites(root: ast.AST) -> list[tuple[list[ast.stmt], int]]:
        out = []
        for block in _statement_lists(root):
            for j, stmt in enumerate(block):
                value = stmt.value if isinstance(stmt, ast.Return) else stmt.test if isinstance(stmt, ast.If) else None
                if value is not None and not isinstance(value, (ast.Name, ast.Constant)):
                    if not any(
                        isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)) for n in ast.walk(value)
                    ):
                        out.append((block, j))
        return out

    if any(isinstance(n, (ast.Lambda, ast.FunctionDef, ast.ClassDef)) and n is not fn for n in ast.walk(fn)):
        return  # a new local could be captured differently by a nested scope: keep it simple
    for i in range(len(sites(fn))):
        new = copy.deepcopy(fn)
        block, j = sites(new)[i]
        stmt = block[j]
        name = _fresh(new, "_value")
        if isinstance(stmt, ast.Return):
            value, stmt.value = stmt.value, ast.Name(name, ast.Load())
        else:
            assert isinstance(stmt, ast.If)
            value, stmt.test = stmt.test, ast.Name(name, ast.Load())
        assert value is not None
        block.insert(j, ast.Assign([ast.Name(name, ast.Store())], value))
        yield new


def returns_to_ifexp(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """``if c: return a`` + ``else: return b`` -> ``return a if c else b``."""

    def is_site(n: ast.AST) -> bool:
        return (
            isinstance(n, ast.If)
            and len(n.body) == 1
            and len(n.orelse) == 1
            and isinstance(n.body[0], ast.Return)
            and isinstance(n.orelse[0], ast.Return)
            and n.body[0].value is not None
            and n.orelse[0].value is not None
        )

    def sites(root: ast.AST) -> list[tuple[list[ast.stmt], int]]:
        return [(b, j) for b in _statement_lists(root) for j, s in enumerate(b) if is_site(s)]

    for i in range(len(sites(fn))):
        new = copy.deepcopy(fn)
        block, j = sites(new)[i]
        stmt = block[j]
        assert isinstance(stmt, ast.If)
        a, b = stmt.body[0], stmt.orelse[0]
        assert isinstance(a, ast.Return) and isinstance(b, ast.Return) and a.value and b.value
        block[j] = ast.Return(ast.IfExp(stmt.test, a.value, b.value))
        yield new


def loop_to_comprehension(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """``acc = []`` + ``for x in it: acc.append(e)`` (optionally under one ``if``) -> ``acc = [e for x in it
    (if c)]``, where the loop variable is not used outside the loop and the loop has no ``else``/``break``."""

    def sites(root: ast.FunctionDef) -> list[tuple[list[ast.stmt], int]]:
        out = []
        for block in _statement_lists(root):
            for j in range(len(block) - 1):
                init, loop = block[j], block[j + 1]
                if not (
                    isinstance(init, ast.Assign)
                    and len(init.targets) == 1
                    and isinstance(init.targets[0], ast.Name)
                    and isinstance(init.value, ast.List)
                    and not init.value.elts
                    and isinstance(loop, ast.For)
                    and not loop.orelse
                    and len(loop.body) == 1
                    and isinstance(loop.target, ast.Name)
                ):
                    continue
                acc, var = init.targets[0].id, loop.target.id
                inner = loop.body[0]
                cond = None
                if isinstance(inner, ast.If) and not inner.orelse and len(inner.body) == 1:
                    cond, inner = inner.test, inner.body[0]
                if not _is_append(inner, acc):
                    continue
                if any(isinstance(n, (ast.Break, ast.Continue, ast.Yield, ast.YieldFrom)) for n in ast.walk(loop)):
                    continue
                element = inner.value.args[0]  # type: ignore[attr-defined]
                if acc in _all_names(element) or (cond is not None and acc in _all_names(cond)):
                    continue
                uses = sum(isinstance(n, ast.Name) and n.id == var for n in ast.walk(root))
                inside = sum(isinstance(n, ast.Name) and n.id == var for n in ast.walk(loop))
                if uses != inside:
                    continue
                out.append((block, j))
        return out

    for i in range(len(sites(fn))):
        new = copy.deepcopy(fn)
        block, j = sites(new)[i]
        init, loop = block[j], block[j + 1]
        assert isinstance(init, ast.Assign) and isinstance(loop, ast.For)
        inner = loop.body[0]
        ifs = []
        if isinstance(inner, ast.If):
            ifs, inner = [inner.test], inner.body[0]
        element = inner.value.args[0]  # type: ignore[attr-defined]
        comp = ast.ListComp(element, [ast.comprehension(loop.target, loop.iter, ifs, is_async=0)])
        block[j : j + 2] = [ast.Assign(init.targets, comp)]
        yield new


def _is_append(stmt: ast.stmt, acc: str) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "append"
        and isinstance(stmt.value.func.value, ast.Name)
        and stmt.value.func.value.id == acc
        and len(stmt.value.args) == 1
        and not stmt.value.keywords
        and not isinstance(stmt.value.args[0], ast.Starred)
    )


def comprehension_to_loop(fn: ast.FunctionDef, rng: random.Random) -> Iterator[ast.FunctionDef]:
    """``return [e for x in it (if c)]`` -> ``acc = []``, ``for x in it: (if c:) acc.append(e)``, ``return
    acc``, for a single plain-name generator whose name is used nowhere else in the function."""

    def sites(root: ast.FunctionDef) -> list[tuple[list[ast.stmt], int]]:
        out = []
        for block in _statement_lists(root):
            for j, stmt in enumerate(block):
                if not (isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.ListComp)):
                    continue
                comp = stmt.value
                if len(comp.generators) != 1 or comp.generators[0].is_async:
                    continue
                gen = comp.generators[0]
                if not isinstance(gen.target, ast.Name) or len(gen.ifs) > 1:
                    continue
                var = gen.target.id
                uses = sum(isinstance(n, ast.Name) and n.id == var for n in ast.walk(root))
                inside = sum(isinstance(n, ast.Name) and n.id == var for n in ast.walk(comp))
                if uses == inside and not any(isinstance(n, ast.NamedExpr) for n in ast.walk(comp)):
                    out.append((block, j))
        return out

    if any(isinstance(n, (ast.Lambda, ast.FunctionDef, ast.ClassDef)) and n is not fn for n in ast.walk(fn)):
        return
    for i in range(len(sites(fn))):
        new = copy.deepcopy(fn)
        block, j = sites(new)[i]
        stmt = block[j]
        assert isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.ListComp)
        comp = stmt.value
        gen = comp.generators[0]
        acc = _fresh(new, "_items")
        append: ast.stmt = ast.Expr(
            ast.Call(ast.Attribute(ast.Name(acc, ast.Load()), "append", ast.Load()), [comp.elt], [])
        )
        body: list[ast.stmt] = [ast.If(gen.ifs[0], [append], [])] if gen.ifs else [append]
        block[j : j + 1] = [
            ast.Assign([ast.Name(acc, ast.Store())], ast.List([], ast.Load())),
            ast.For(gen.target, gen.iter, body, []),
            ast.Return(ast.Name(acc, ast.Load())),
        ]
        yield new


TRANSFORMS: dict[str, Callable[[ast.FunctionDef, random.Random], Iterator[ast.FunctionDef]]] = {
    "rename_locals": rename_locals,
    "swap_if_else": swap_if_else,
    "demorgan": demorgan,
    "extract_variable": extract_variable,
    "returns_to_ifexp": returns_to_ifexp,
    "loop_to_comprehension": loop_to_comprehension,
    "comprehension_to_loop": comprehension_to_loop,
}


def equivalent_rewrites(text: str, name: str, *, seed: int = 0, limit: int = 6) -> list[tuple[str, str]]:
    """Up to ``limit`` ``(transform, module text)`` rewrites of function ``name``, each different from the
    reference as an AST, in a seeded order that spreads over the transforms. A rename is also combined with
    each structural transform, so most rewrites differ in more than one way."""
    tree = ast.parse(text)
    fn = find_function(tree, name)
    if fn is None:
        return []
    rng = random.Random(f"rewrites:{seed}:{name}")
    reference = ast.dump(fn)
    per_kind: dict[str, list[ast.FunctionDef]] = {}
    for kind, transform in TRANSFORMS.items():
        for variant in transform(copy.deepcopy(fn), rng):
            per_kind.setdefault(kind, []).append(variant)
    renamed = per_kind.get("rename_locals", [])
    for kind in list(per_kind):
        if kind != "rename_locals" and renamed:
            per_kind[f"rename_locals+{kind}"] = [v for variant in per_kind[kind] for v in rename_locals(variant, rng)]
    out: list[tuple[str, str]] = []
    seen = {reference}
    kinds = sorted(per_kind)
    rng.shuffle(kinds)
    while len(out) < limit and any(per_kind[k] for k in kinds):
        for kind in kinds:
            if per_kind[kind] and len(out) < limit:
                variant = per_kind[kind].pop(rng.randrange(len(per_kind[kind])))
                dump = ast.dump(variant)
                if dump in seen:
                    continue
                seen.add(dump)
                new_text = splice(text, name, variant)
                compile(new_text, "<rewrite>", "exec")
                out.append((kind, new_text))
    return out


def wrong_fixes(text: str, path: str, mutation: Mutation, *, seed: int = 0, limit: int = 6) -> list[tuple[str, str]]:
    """``(label, module text)``: the task's original bug first, then up to ``limit`` other single mutations of
    the reference function (seeded choice, one per line and operator at most)."""
    out = [("original_bug", mutation.apply(text))]
    others = [
        m
        for m in candidate_mutations(path, text)
        if m.function == mutation.function and (m.lineno, m.mutated) != (mutation.lineno, mutation.mutated)
    ]
    rng = random.Random(f"wrong:{seed}:{mutation.function}")
    rng.shuffle(others)
    for m in others[:limit]:
        out.append((f"mutant:{m.operator}@{m.lineno}", m.apply(text)))
    return out
