"""Our structural verifier against BFCL's own answers and AST checker, used here only as a test oracle.

BFCL's ``ast_checker`` imports every provider SDK through ``bfcl_eval.constants.model_config``; a stub of that
one module (inside this test only) avoids it. For every single-turn task we judge the ground-truth call (each
parameter at its first acceptable value), an alternative ground truth (each at its last acceptable value)
and three near-misses (a changed value, a wrong function name, a dropped required argument), with both our
env's judge and BFCL's checker, and count agreement.
"""

from __future__ import annotations

import copy
import sys
import types
from collections import Counter, defaultdict

import pytest
from tooluse_helpers import single_env

from pivotgym.types import ToolCall
from pivotgym_tooluse import bfcl
from pivotgym_tooluse.matching import acceptable_values, answer_calls, expert_call
from pivotgym_tooluse.parsing import ParsedAction

CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)


@pytest.fixture(scope="module")
def bfcl_checker():
    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    saved = sys.modules.get("bfcl_eval.constants.model_config")
    sys.modules["bfcl_eval.constants.model_config"] = stub
    try:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

        yield ast_checker, Language
    finally:
        if saved is None:
            sys.modules.pop("bfcl_eval.constants.model_config", None)
        else:
            sys.modules["bfcl_eval.constants.model_config"] = saved
        sys.modules.pop("bfcl_eval.eval_checker.ast_eval.ast_checker", None)


def _mutate(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "qqq" if value else "qqq"
    if isinstance(value, list):
        return value + ["qqq"]
    if isinstance(value, dict):
        return {**value, "qqq": 1}
    return "qqq"


def _last_choice(answer):
    return {p: [next((x for x in reversed(acceptable_values(acc)) if x != ""), "")] for p, acc in answer.items()}


def _candidates(answers, functions, schemas, language):
    gold = [expert_call(n, a, schemas.get(n), language) for n, a in answer_calls(answers)]
    alt = [expert_call(n, _last_choice(a), schemas.get(n), language) for n, a in answer_calls(answers)]
    yield "ground_truth", gold
    yield "alternative", alt
    first = gold[0]
    if first.arguments:
        key = sorted(first.arguments)[0]
        yield "wrong_value", [ToolCall(first.name, {**first.arguments, key: _mutate(first.arguments[key])}), *gold[1:]]
        required = next((f["parameters"].get("required") or [] for f in functions if f["name"] == first.name), [])
        dropped = next((r for r in required if r in first.arguments), None)
        if dropped:
            yield (
                "missing_required",
                [ToolCall(first.name, {k: v for k, v in first.arguments.items() if k != dropped}), *gold[1:]],
            )
    yield "wrong_function", [ToolCall(first.name + "_other", dict(first.arguments)), *gold[1:]]


def test_agreement_with_bfcl_checker(bfcl_checker):
    ast_checker, Language = bfcl_checker
    env = single_env("tooluse/bfcl-live-v0")
    agree, total, disagreements = Counter(), Counter(), []
    for category in CATEGORIES:
        language = Language(bfcl.language_of(category))
        for entry in bfcl.load_category(category):
            task = type(
                "T",
                (),
                {"data": {"answers": entry["answers"], "functions": entry["function"], "language": language.value}},
            )()
            schemas = env.schemas_for(task)
            for kind, calls in _candidates(entry["answers"], entry["function"], schemas, language.value):
                ours = env.judge(ParsedAction(calls=calls), task)[0] == 1.0
                output = [{c.name: copy.deepcopy(c.arguments)} for c in calls]
                theirs = ast_checker(
                    copy.deepcopy(entry["function"]),
                    output,
                    copy.deepcopy(entry["answers"]),
                    language,
                    category,
                    "stub-model",
                )["valid"]
                total[kind] += 1
                agree[kind] += ours == theirs
                if ours != theirs:
                    disagreements.append((kind, entry["id"], ours, theirs))
    rates = {k: agree[k] / total[k] for k in total}
    print("\nagreement with BFCL's checker:", {k: f"{rates[k]:.4f} ({agree[k]}/{total[k]})" for k in total})
    print("disagreements by kind:", Counter(d[0] for d in disagreements), disagreements[:8])
    assert total["ground_truth"] > 2500
    assert rates["ground_truth"] >= 0.99
    assert rates["wrong_value"] >= 0.95 and rates["wrong_function"] >= 0.99 and rates["missing_required"] >= 0.99
