"""The synthesiser on a tiny hand-written package: seeded runs repeat exactly, and only verified mutants that
break some test become instances."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pivotgym.sandbox import get_sandbox
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym_swe.mutate import Mutation, candidate_mutations, sample_mutations
from pivotgym_swe.sources import Project
from pivotgym_swe.synth import (
    SynthConfig,
    baseline_passing,
    fix_edit,
    screen_mutant,
    screen_targets,
    source_files,
    synth_project,
    verify_instance,
)

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

CALC = """\
def add(a, b):
    return a + b


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def unused(n):
    return n * 2 + 1
"""
WORDS = """\
def shout(text):
    return text.upper() + "!"
"""
TEST_CALC = """\
from pgtiny.calc import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0
    assert clamp(2, 0, 3) == 2


def test_add_strings():
    assert add("a", "b") == "ab"
"""
TEST_WORDS = """\
from pgtiny.words import shout


def test_shout():
    assert shout("hi") == "HI!"
"""
TINY = Project(
    name="pgtiny",
    kind="local",
    version="0",
    packages=("pgtiny",),
    test_paths=("tests",),
    test_split_modules=("pgtiny/words.py",),
)


@pytest.fixture(scope="module")
def tiny_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pgtiny-repo")
    files = {
        "pgtiny/__init__.py": "",
        "pgtiny/calc.py": CALC,
        "pgtiny/words.py": WORDS,
        "tests/__init__.py": "",
        "tests/test_calc.py": TEST_CALC,
        "tests/test_words.py": TEST_WORDS,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def passing(tiny_tree) -> set[str]:
    return baseline_passing(TINY, tiny_tree, get_sandbox(), tiny_tree.parent)


def _mutation(function: str, operator: str) -> Mutation:
    return next(
        m for m in candidate_mutations("pgtiny/calc.py", CALC) if m.function == function and m.operator == operator
    )


def test_seeded_synthesis_gives_the_same_instances_twice(tiny_tree):
    config = SynthConfig(seed=7, max_tries=4)
    first = list(synth_project(TINY, (0, 1), config, tree=tiny_tree))
    second = list(synth_project(TINY, (0, 1), config, tree=tiny_tree))
    assert len(first) == 1 and first == second
    row = first[0]
    assert row["split"] == "test" and row["module"] == "pgtiny/words.py"  # split by source module
    assert row["FAIL_TO_PASS"] == ["tests/test_words.py::test_shout"] and row["PASS_TO_PASS"] == []
    assert row["instance_id"].startswith("pgtiny__shout-")


def test_mutation_order_depends_only_on_the_seed():
    files = {"pgtiny/calc.py": CALC, "pgtiny/words.py": WORDS}
    assert sample_mutations(files, 1) == sample_mutations(dict(reversed(files.items())), 1)
    assert sample_mutations(files, 1) != sample_mutations(files, 2)


def test_a_mutant_that_breaks_no_test_is_rejected(tiny_tree, passing, tmp_path):
    mutation = _mutation("unused", "flip_operator")
    got = screen_mutant(TINY, tiny_tree, mutation, CALC, "train", passing, SynthConfig(), get_sandbox(), tmp_path)
    assert got is None


def test_a_breaking_mutant_becomes_a_verified_instance(tiny_tree, passing, tmp_path):
    mutation = _mutation("add", "flip_operator")  # a + b -> a - b
    row = screen_mutant(TINY, tiny_tree, mutation, CALC, "train", passing, SynthConfig(), get_sandbox(), tmp_path)
    assert row is not None
    assert row["FAIL_TO_PASS"] == ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_strings"]
    assert row["PASS_TO_PASS"] == ["tests/test_calc.py::test_clamp"]
    assert row["fix"] == fix_edit(mutation, CALC) and "a - b" in row["fix"]["old"]
    assert "test_add" in row["problem_statement"]
    assert verify_instance(row, tiny_tree, get_sandbox())
    # a reference fix that does not repair the bug fails verification
    broken = dict(row, fix=dict(row["fix"], new=row["fix"]["old"]))
    assert not verify_instance(broken, tiny_tree, get_sandbox())


def test_too_many_failing_tests_are_rejected(tiny_tree, passing, tmp_path):
    mutation = _mutation("add", "flip_operator")
    config = SynthConfig(max_f2p=1)  # this mutant breaks two tests
    assert screen_mutant(TINY, tiny_tree, mutation, CALC, "train", passing, config, get_sandbox(), tmp_path) is None


def test_screen_targets_and_source_files(tiny_tree, passing):
    assert screen_targets("pgtiny/calc.py", passing) == ["tests/test_calc.py"]
    assert screen_targets("toolz/_signatures.py", {"toolz/tests/test_signatures.py::test_x"}) == [
        "toolz/tests/test_signatures.py"
    ]
    assert screen_targets("pgtiny/nothing.py", passing) == []
    assert sorted(source_files(tiny_tree)) == ["pgtiny/calc.py", "pgtiny/words.py"]


def test_fix_edit_reverts_every_candidate_mutation():
    for mutation in candidate_mutations("pgtiny/calc.py", CALC):
        fix = fix_edit(mutation, CALC)
        buggy = mutation.apply(CALC)
        assert buggy.count(fix["old"]) == 1
        assert buggy.replace(fix["old"], fix["new"]) == CALC
