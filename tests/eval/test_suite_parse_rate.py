"""Every generated single-turn member reports its parse rate beside its accuracy (so a gain that is only a
format effect shows as one); members that judge no free-text reply report None."""

from __future__ import annotations

import pytest
from core_helpers import CounterEnv

from pivotgym.eval import evaluate_suite
from pivotgym.eval.suites import parse_rate
from pivotgym.jsonl import read_jsonl
from pivotgym.registry import EnvSpec, get_registry
from pivotgym.types import Completion


class Cycle:
    """A sampler that plays ``replies`` in turn, one per prompt."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.calls = 0

    def describe(self) -> dict[str, str]:
        return {"model": "cycle"}

    def sample(self, prompts, n=1, params=None):
        out = []
        for _ in prompts:
            out.append([Completion(self.replies[self.calls % len(self.replies)], token_ids=[1], finish_reason="stop")])
            self.calls += 1
        return out


def test_parse_rate_counts_replies_with_an_answer_wrong_or_right(tmp_path):
    # arithmetic's items are 1-digit sums: "100" is a parsed wrong answer, prose is no answer at all
    out = tmp_path / "s.json"
    result = evaluate_suite(
        {"general/arithmetic-v0": "ood"}, Cycle("100", "no idea", "no idea", "100"), out, limit=8, progress=False
    )
    score = result["scores"]["general/arithmetic-v0"]
    assert score["value"] == 0.0 and score["parse_rate"] == pytest.approx(0.5)
    items = read_jsonl(str(out) + ".items.jsonl")
    assert [item["parsed"] for item in items] == [True, False, False, True] * 2


def test_a_format_effect_shows_as_parse_rate_not_only_accuracy(tmp_path):
    # two reply styles with the same (absent) knowledge: one always gives a readable number, one never does;
    # the parse rate tells them apart whatever their accuracy
    always = evaluate_suite({"general/arithmetic-v0": "ood"}, Cycle("= 7"), limit=10, progress=False)
    never = evaluate_suite({"general/arithmetic-v0": "ood"}, Cycle("seven?"), limit=10, progress=False)
    assert always["scores"]["general/arithmetic-v0"]["parse_rate"] == 1.0
    assert never["scores"]["general/arithmetic-v0"]["parse_rate"] == 0.0
    assert never["scores"]["general/arithmetic-v0"]["value"] == 0.0


def test_episode_members_report_no_parse_rate(monkeypatch):
    monkeypatch.setitem(get_registry().envs, "test/counter-v0", EnvSpec("test/counter-v0", CounterEnv, "tests"))
    result = evaluate_suite({"test/counter-v0@test": "in_domain"}, Cycle("add 1"), limit=1, progress=False)
    assert result["scores"]["test/counter-v0@test"]["parse_rate"] is None


def test_parse_rate_of_items():
    assert parse_rate([{"parsed": True}, {"parsed": False}, {"parsed": True}, {"parsed": True}]) == 0.75
    assert parse_rate([{"parsed": True}, {"reward": 1.0}]) is None  # an older item without the field
    assert parse_rate([]) is None
