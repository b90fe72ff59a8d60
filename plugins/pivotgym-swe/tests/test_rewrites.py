"""The rewrites the verifier benchmark labels correct by construction do not change behaviour; the forgery
and the wrong fixes do. Pure AST work, run in-process on a function of our own (no sandbox needed)."""

from __future__ import annotations

import ast
import itertools
import random

import pytest

from pivotgym_swe.mutate import candidate_mutations
from pivotgym_swe.rewrites import TRANSFORMS, always_equal, equivalent_rewrites, wrong_fixes

SOURCE = '''
import math


def target(xs, limit=3, flag=False):
    """A function with a bit of everything the transforms look for."""
    total = 0
    picked = []
    for x in xs:
        if x % 2 == 0 and x < limit * 4:
            picked.append(x * 2)
    if flag or not picked:
        total = len(xs)
    else:
        total = sum(picked) + math.floor(limit / 2)
    scaled = [v + total for v in picked if v != limit]
    if total > limit:
        return scaled
    else:
        return [total, *scaled]


def other(a):
    return a
'''
INPUTS = [
    (xs, limit, flag)
    for xs in ([], [1], [2, 4, 6], [0, 3, 8, 12, 7], list(range(-5, 9)))
    for limit, flag in itertools.product((0, 1, 3, 10), (False, True))
]


def load(text: str):
    namespace: dict = {}
    exec(compile(text, "<test>", "exec"), namespace)  # our own source
    return namespace["target"]


def behaviour(fn) -> list:
    out = []
    for args in INPUTS:
        try:
            out.append(("ok", fn(*args)))
        except Exception as exc:
            out.append(("raise", type(exc).__name__))
    return out


def test_every_transform_applies_and_preserves_behaviour():
    reference = behaviour(load(SOURCE))
    fn = next(n for n in ast.parse(SOURCE).body if isinstance(n, ast.FunctionDef) and n.name == "target")
    applied = set()
    for kind, transform in TRANSFORMS.items():
        for variant in transform(fn, random.Random(0)):
            applied.add(kind)
            assert ast.dump(variant) != ast.dump(fn), kind
            text = SOURCE.replace(
                ast.get_source_segment(SOURCE, fn) or "", ast.unparse(ast.fix_missing_locations(variant))
            )
            assert behaviour(load(text)) == reference, (kind, ast.unparse(ast.fix_missing_locations(variant)))
    assert applied >= {"rename_locals", "swap_if_else", "demorgan", "extract_variable", "returns_to_ifexp"}
    assert "loop_to_comprehension" in applied


def test_equivalent_rewrites_are_distinct_and_equivalent():
    reference = behaviour(load(SOURCE))
    rewrites = equivalent_rewrites(SOURCE, "target", limit=12)
    assert len(rewrites) == 12
    assert len({text for _kind, text in rewrites}) == 12
    for kind, text in rewrites:
        assert behaviour(load(text)) == reference, kind
        assert "def other(a):" in text  # the rest of the module is kept


def test_comprehension_to_loop():
    text = "def f(xs):\n    return [x * 2 for x in xs if x]\n"
    rewrites = dict(equivalent_rewrites(text, "f"))
    assert "comprehension_to_loop" in rewrites
    fn = load(rewrites["comprehension_to_loop"].replace("def f", "def target"))
    assert fn([0, 1, 2]) == [2, 4]
    assert "for " in rewrites["comprehension_to_loop"] and "[x * 2 for" not in rewrites["comprehension_to_loop"]


def test_forgery_and_wrong_fixes():
    forged = load(always_equal(SOURCE, "target"))
    value = forged([1], 2)
    assert value == 123 and value == "anything" and not (value != [])
    assert load(always_equal(SOURCE, "target")).__doc__  # the docstring stays
    mutation = next(m for m in candidate_mutations("m.py", SOURCE) if m.function == "target")
    fixes = wrong_fixes(SOURCE, "m.py", mutation, limit=4)
    assert fixes[0] == ("original_bug", mutation.apply(SOURCE))
    assert len(fixes) == 5 and all(label.startswith("mutant:") for label, _ in fixes[1:])
    assert all(text != SOURCE for _, text in fixes)


def test_a_method_has_no_module_level_rewrite():
    text = "class C:\n    def m(self):\n        return 1\n"
    assert equivalent_rewrites(text, "m") == []
    with pytest.raises(ValueError, match="no module-level function"):
        always_equal(text, "m")
