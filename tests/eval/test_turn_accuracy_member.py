"""A suite member ``ENV_ID@SPLIT:turns`` is scored by turn accuracy (:mod:`pivotgym.eval.turns`): one greedy
action from each expert state of each task, judged by the env's functional verifier; its result carries
``turn_accuracy`` per task beside the same env's episode success."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from pivotgym.errors import ConfigError
from pivotgym.eval import Member, evaluate_suite
from pivotgym.jsonl import read_jsonl
from pivotgym.types import Completion

OPS = {"Add": lambda v, k: v + k, "Subtract": lambda v, k: v - k, "Multiply by": lambda v, k: v * k}


class Calculator:
    """Answers the arith env's instruction from the prompt alone; gets every ``Multiply by`` wrong."""

    def describe(self) -> dict[str, str]:
        return {"model": "calculator"}

    def sample(self, prompts, n=1, params=None):
        return [[Completion(self.answer(messages))] * n for messages in prompts]

    @staticmethod
    def answer(messages) -> str:
        said = [m["content"] for m in messages if m["role"] == "assistant"]
        value = Fraction(said[-1]) if said else Fraction(re.search(r"Start with (-?\d+)", messages[1]["content"])[1])
        asked = re.search(r"(Add|Subtract|Multiply by) (\d+)\. What is the result\?$", messages[-1]["content"])
        if asked is None:
            return "0"  # told to try again after a wrong product: the episode stays failed
        op, k = asked.groups()
        result = OPS[op](value, int(k)) + (1 if op == "Multiply by" else 0)
        return str(result)


def test_a_member_key_suffix_chooses_the_measure():
    assert Member.parse("planning/blocks-v0@test:turns", "in_domain") == Member(
        "planning/blocks-v0@test:turns", "planning/blocks-v0", "test", "in_domain", "turns"
    )
    assert Member.parse("general/navigate-v0", "ood").measure is None
    assert Member.parse("a/b-v0:episodes", "ood").split is None
    with pytest.raises(
        ConfigError,
        match=r"suite member 'a/b-v0@test:turn': unknown measure 'turn' after ':'; "
        r"use one of :episodes, :turns",
    ):
        Member.parse("a/b-v0@test:turn", "in_domain")


def test_turn_accuracy_member_scores_each_task_by_its_expert_states(arith_registry, tmp_path):
    from pivotgym.registry import make

    env = make("arith/chain-v0")
    tasks = list(env.tasks("test"))[:3]
    expected = {t.id: sum(op != "mul" for op, _ in t.data["ops"]) / len(t.data["ops"]) for t in tasks}
    out = tmp_path / "s.json"
    suite = {"arith/chain-v0@test:turns": "in_domain", "arith/chain-v0@test": "in_domain"}
    result = evaluate_suite(suite, Calculator(), out, limit=3, progress=False)
    turns = result["scores"]["arith/chain-v0@test:turns"]
    assert turns["metric"] == "turn_accuracy" and turns["n"] == 3
    assert turns["per_item"] == pytest.approx(expected)
    assert turns["states"] == sum(len(t.data["ops"]) for t in tasks) and turns["failed"] == 0
    assert turns["value"] == pytest.approx(sum(expected.values()) / 3)
    episodes = result["scores"]["arith/chain-v0@test"]  # a wrong product ends no episode right: success 0 or 1
    assert episodes["metric"] == "success"
    assert episodes["per_item"] == {t.id: float(all(op != "mul" for op, _ in t.data["ops"])) for t in tasks}
    items = [r for r in read_jsonl(str(out) + ".items.jsonl") if r["member"] == "arith/chain-v0@test:turns"]
    assert [(r["task_id"], r["metric"], r["states"]) for r in items] == [
        (t.id, "turn_accuracy", len(t.data["ops"])) for t in tasks
    ]

    class Never(Calculator):
        def sample(self, prompts, n=1, params=None):
            raise AssertionError("resumed items are not measured again")

    again = evaluate_suite(suite, Never(), out, limit=3, progress=False, model="calculator")
    assert again["scores"]["arith/chain-v0@test:turns"]["per_item"] == turns["per_item"]
