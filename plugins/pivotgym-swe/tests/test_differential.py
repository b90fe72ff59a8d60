"""The differential check and the typed HumanEval checks: what the hidden tests alone let through is caught.

Covered: an always-equal object fails on each source; a value of another type (5.0 for 5) fails the typed
HumanEval check; a wrong fix the hidden tests miss is caught; the reference fix passes the judge and the
check on every shipped test-split task; the candidate's process can read neither the reference source nor
the cached reference outputs; missing, duplicated, foreign and malformed harness records are mismatches.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import random
from pathlib import Path

import pytest

from pivotgym.sandbox import fork_dir
from pivotgym.sandbox.bwrap import bwrap_available
from pivotgym_swe import differential
from pivotgym_swe.differential import (
    HarnessRun,
    Reference,
    candidate_payload,
    changed_examples,
    check_differential,
    compare,
    example_outcome,
    example_passes,
    extract_examples,
    generate_inputs,
    parse_lines,
    reference_for,
    run_harness,
    same_outcome,
    setup,
)
from pivotgym_swe.mutate import Mutation
from pivotgym_swe.rewrites import always_equal, equivalent_rewrites, splice
from pivotgym_swe.sources import TYPED_MARKER, cache_root
from pivotgym_swe.tasks import load_task_set, pristine_tree, task_file
from pivotgym_swe.testing import judge

requires_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def task(name: str, part: str) -> dict:
    return next(t for t in load_task_set(str(task_file(name))) if part in t["instance_id"])


def tree_with(instance: dict, text: str, dest: Path) -> Path:
    """A fork of the task's pristine tree with the mutated module replaced by ``text``."""
    work = fork_dir(pristine_tree(instance), dest)
    path = work / instance["mutation"]["path"]
    path.unlink()
    path.write_text(text)
    return work


def reference_text(instance: dict) -> str:
    return (pristine_tree(instance) / instance["mutation"]["path"]).read_text()


# ------------------------------------------------------------------------------------------ host-side logic
def test_missing_duplicated_foreign_and_malformed_records_are_mismatches():
    ref = Reference("m", ["f"], [{"id": str(i), "target": "f", "args": [], "kwargs": {}} for i in range(4)], {}, [], {})
    ref.digests = {str(i): f"h{i}" for i in range(4)}
    nonce = "n0"
    lines = [
        f'{nonce}\t{{"k": "call", "id": "0", "h": "h0"}}',  # right
        f'{nonce}\t{{"k": "call", "id": "1", "h": "h1"}}',  # duplicated below
        f'{nonce}\t{{"k": "call", "id": "1", "h": "h1"}}',
        'other\t{"k": "call", "id": "2", "h": "h2"}',  # a foreign nonce: noise, so 2 is missing
        f"{nonce}\tnot json",  # malformed
        f'{nonce}\t{{"k": "call", "id": "3", "h": "wrong"}}',  # wrong digest
        f'{nonce}\t{{"k": "end"}}',
    ]
    run = parse_lines("\n".join(lines), nonce)
    assert run.malformed == 1 and run.ended
    result = compare(ref, run, {})
    assert not result.ok
    assert result.counts["call_mismatches"] == 3  # 1 duplicated, 2 missing, 3 wrong
    assert "malformed" in result.reason
    # every record right, nothing else: agreement
    good = "\n".join(f'{nonce}\t{{"k": "call", "id": "{i}", "h": "h{i}"}}' for i in range(4))
    assert compare(ref, parse_lines(good + f'\n{nonce}\t{{"k": "end"}}', nonce), {}).ok
    assert not compare(ref, HarnessRun(), {}).ok  # a run that printed nothing


def test_inputs_are_seeded_and_keep_the_recorded_calls_first():
    seeds = [
        {"target": "f", "args": [{"t": "list", "v": [{"t": "int", "v": "3"}, {"t": "int", "v": "1"}]}], "kwargs": {}},
        {"target": "f", "args": [{"t": "str", "v": "abc"}, {"t": "int", "v": "2"}], "kwargs": {}},
    ]
    a, b = generate_inputs(seeds, "salt"), generate_inputs(seeds, "salt")
    assert a == b and len(a) > 20
    assert [i["origin"] for i in a[:2]] == ["tests", "tests"] and {i["origin"] for i in a[2:]} == {"mutated"}
    assert generate_inputs(seeds, "other salt") != a
    assert len({json.dumps([i["args"], i["kwargs"]], sort_keys=True) for i in a}) == len(a)


def test_docstring_examples_are_checked_like_doctest():
    source = '''
def f(x):
    """Double.

    >>> f(2)
    4
    >>> f(None)
    Traceback (most recent call last):
    TypeError: nope
    >>> f(1)  # doctest: +SKIP
    99
    """
'''
    groups, expected = extract_examples(source)
    assert [ex["id"] for g in groups for ex in g["examples"]] == ["f#0", "f#1"]
    assert example_passes(expected["f#0"], "4\n", None)
    assert not example_passes(expected["f#0"], "5\n", None)
    assert not example_passes(expected["f#0"], "", "TypeError: x\n")
    assert example_passes(expected["f#1"], "", "TypeError: nope\n")
    assert not example_passes(expected["f#1"], "", "ValueError: nope\n")
    assert not example_passes(expected["f#1"], "None\n", None)


def test_changed_examples_change_literals_and_keep_each_docstring_together():
    groups = [
        {"name": "f", "examples": [{"id": "f#0", "source": "x = [1, 2, 3]\n"}, {"id": "f#1", "source": "f(x, 4)\n"}]},
        {"name": "g", "examples": [{"id": "g#0", "source": "g('a')\n"}]},  # nothing to change: no copy
    ]
    a = changed_examples(groups, random.Random(1))
    assert a == changed_examples(groups, random.Random(1))  # one stream, one set of copies
    assert a != changed_examples(groups, random.Random(2))
    assert [g["name"] for g in a] == ["f~1", "f~2"]
    for group in a:
        variant = group["name"].split("~")[1]
        assert [ex["id"] for ex in group["examples"]] == [f"f#0~{variant}", f"f#1~{variant}"]
        sources = "".join(ex["source"] for ex in group["examples"])
        assert sources != "x = [1, 2, 3]\nf(x, 4)\n"
        for ex in group["examples"]:
            compile(ex["source"], "<doctest>", "single")


def test_examples_are_compared_with_the_reference_outcome_not_the_docstring():
    expect = example_outcome({"got": "<obj at 0x7f00aa11>\n", "exc": None}, "f()")
    assert same_outcome(expect, {"got": "<obj at 0x55aa0000>\n", "exc": None})  # addresses are masked
    assert not same_outcome(expect, {"got": "<obj at 0x7f00aa11> \n", "exc": None})  # exact otherwise
    assert not same_outcome(expect, {"got": "<obj at 0x7f00aa11>\n", "exc": "ValueError: x\n"})
    raised = example_outcome({"got": "", "exc": "ValueError: bad 3\n"})
    assert same_outcome(raised, {"got": "", "exc": "ValueError: bad 3\n"})
    assert not same_outcome(raised, {"got": "", "exc": "ValueError: bad 4\n"})


# ------------------------------------------------------------------------------------------ sandboxed
@requires_bwrap
@pytest.mark.parametrize(
    ("name", "part"),
    [("humanevalfix", "131"), ("toolz", "merge-drop-condition"), ("more-itertools", "nth_combination")],
)
def test_an_always_equal_object_fails(name, part, tmp_path):
    instance = task(name, part)
    work = tree_with(instance, always_equal(reference_text(instance), instance["mutation"]["function"]), tmp_path / "w")
    result = check_differential(work, instance)
    assert not result.ok and not result.infra, result
    assert result.counts["call_mismatches"] > 0
    assert any("_AlwaysEqual" in d["got"] for d in result.details if d["kind"] == "call")
    assert not judge(work, instance, pristine_tree(instance)).solved


@requires_bwrap
def test_humaneval_checks_compare_types(tmp_path):
    instance = task("humanevalfix", "131")
    test_text = (pristine_tree(instance) / "test_solution.py").read_text()
    labels = ast.literal_eval(test_text.split(f"{TYPED_MARKER} = ", 1)[1].splitlines()[0])
    assert labels and set(labels) == {"int"}  # types only: no value of the canonical solution is embedded
    # digits() returning the right number as a float: equal under ==, rejected for its type
    text = reference_text(instance)
    floated = text.replace("return product", "return float(product)")
    assert floated != text
    verdict = judge(tree_with(instance, floated, tmp_path / "f"), instance, pristine_tree(instance))
    assert not verdict.solved
    assert "the reference returns int" in next(iter(verdict.run.failures.values()), ""), verdict.run.failures


@requires_bwrap
def test_a_wrong_fix_the_hidden_tests_miss_is_caught(tmp_path):
    # merge() repaired for every call the tests make (a list of dicts is unpacked, a mapping is not), but a
    # tuple or an iterator of dicts is no longer unpacked: the tests never pass one
    instance = task("toolz", "merge-drop-condition")
    text = reference_text(instance)
    wrong = text.replace(
        "    if len(dicts) == 1 and not isinstance(dicts[0], Mapping):\n",
        "    if len(dicts) == 1 and isinstance(dicts[0], list):\n",
        1,
    )
    assert wrong != text
    work = tree_with(instance, wrong, tmp_path / "w")
    assert judge(work, instance, pristine_tree(instance), differential=False).solved  # the hidden tests pass...
    result = check_differential(work, instance)
    assert not result.ok and result.counts["call_mismatches"] > 0, result  # ...the differential does not
    verdict = judge(work, instance, pristine_tree(instance))  # and the judge, which runs both, says so
    assert not verdict.solved and verdict.differential is not None and not verdict.differential.ok


@requires_bwrap
def test_a_broken_docstring_example_is_caught(tmp_path):
    instance = task("more-itertools", "consume")
    text = reference_text(instance)
    # take() is not the task's function, but its docstring examples (and others using it) run too
    broken = text.replace("    return list(islice(iterable, n))\n", "    return list(islice(iterable, n + 1))\n", 1)
    assert broken != text
    result = check_differential(tree_with(instance, broken, tmp_path / "w"), instance)
    assert not result.ok and result.counts["example_failures"] > 0, result


@requires_bwrap
def test_equivalent_rewrites_agree(tmp_path):
    instance = task("humanevalfix", "148")
    rewrites = equivalent_rewrites(reference_text(instance), instance["mutation"]["function"], limit=2)
    assert rewrites
    for i, (_kind, text) in enumerate(rewrites):
        assert check_differential(tree_with(instance, text, tmp_path / f"r{i}"), instance).ok


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@requires_bwrap
def test_the_reference_passes_on_every_test_split_task(tmp_path):
    for name in ("toolz", "more-itertools", "humanevalfix"):
        for instance in load_task_set(str(task_file(name))):
            if instance["split"] != "test":
                continue
            work = fork_dir(pristine_tree(instance), tmp_path / instance["instance_id"])
            assert judge(work, instance, pristine_tree(instance)).solved, instance["instance_id"]
            result = check_differential(work, instance)
            assert result.ok, (instance["instance_id"], result)
            assert result.counts["inputs"] > 0, instance["instance_id"]  # never vacuous on the test split


@requires_bwrap
def test_the_reference_is_out_of_the_candidates_reach(tmp_path):
    instance = task("toolz", "merge-drop-condition")
    ref = reference_for(instance)
    cached = sorted((cache_root() / "differential").glob("*.json"))
    assert cached, "the reference outputs are cached on the host"
    spec = importlib.util.find_spec("toolz")
    installed = [str(Path(p) / "dicttoolz.py") for p in (spec.submodule_search_locations or [])] if spec else []
    secrets = [str(p) for p in cached[:3]] + [str(pristine_tree(instance) / "toolz" / "dicttoolz.py"), *installed]
    # the candidate's merge reports which of those paths it can open
    probe = splice(
        reference_text(instance),
        "merge",
        ast.parse(
            "def merge(*dicts, **kwargs):\n"
            "    found = []\n"
            f"    for path in {secrets!r}:\n"
            "        try:\n"
            "            with open(path, 'rb') as fh:\n"
            "                fh.read(1)\n"
            "            found.append(path)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return found\n"
        ).body[0],
    )
    work = tree_with(instance, probe, tmp_path / "w")
    payload = candidate_payload(ref, instance)
    sent = json.dumps(payload)
    assert not any(digest in sent for digest in ref.digests.values())
    assert set(payload) == {"mode", "module", "inputs", "examples", "packages"}
    sandbox, python, hide = setup(instance, None, None)
    run = run_harness(work, {**payload, "inputs": payload["inputs"][:1]}, sandbox=sandbox, hide=hide, python=python)
    assert run.ended and not run.import_error, run
    (record,) = run.calls[payload["inputs"][0]["id"]]
    assert record["p"] == '["list", [], 0]', record  # the candidate could open none of them


@requires_bwrap
def test_a_rebuilt_reference_asks_other_inputs_and_other_examples():
    """Nothing in the repository or the code predicts the generated calls or the changed examples: they come from
    a secret drawn when the reference is built (two builds share only the tests' own calls)."""
    instance = task("more-itertools", "nth_combination")
    first = reference_for(instance, refresh=True)
    second = reference_for(instance, refresh=True)

    def calls(ref, origin):
        return {json.dumps([i["args"], i["kwargs"]], sort_keys=True) for i in ref.inputs if i["origin"] == origin}

    assert calls(first, "tests") == calls(second, "tests")
    assert calls(first, "mutated") != calls(second, "mutated")
    changed = [{ex["source"] for g in r.examples if "~" in g["name"] for ex in g["examples"]} for r in (first, second)]
    assert changed[0] and changed[0] != changed[1]
    assert reference_for(instance) is second  # a judgement reuses the last build


def test_module_name_and_targets():
    assert differential.module_name("toolz/dicttoolz.py") == "toolz.dicttoolz"
    assert differential.module_name("solution.py") == "solution"
    assert differential.module_name("pkg/__init__.py") == "pkg"
    instance = task("toolz", "merge-drop-condition")
    assert differential.target_functions(instance, reference_text(instance)) == ["merge"]
    method_task = task("toolz", "__init__")
    assert differential.target_functions(method_task, reference_text(method_task)) == []
    assert Mutation(**method_task["mutation"]).function == "__init__"


@requires_bwrap
@pytest.mark.parametrize(
    ("name", "part"), [("toolz", "count"), ("toolz", "reduceby"), ("more-itertools", "polynomial_derivative")]
)
def test_forgeries_the_hidden_tests_pass_are_rejected(name, part, tmp_path):
    # the issue's residue: on these tasks every hidden test passes for an always-equal object; reduceby's tests
    # pass lambdas and test-module functions, which the recorder carries by value
    instance = task(name, part)
    work = tree_with(instance, always_equal(reference_text(instance), instance["mutation"]["function"]), tmp_path / "w")
    verdict = judge(work, instance, pristine_tree(instance))
    assert all(verdict.fail_to_pass.values()) and all(verdict.pass_to_pass.values()), verdict.summary
    result = check_differential(work, instance)
    assert not result.ok and result.counts["inputs"] > 0 and result.counts["call_mismatches"] > 0, result
