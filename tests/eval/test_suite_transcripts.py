"""Suite items carry each episode's transcript (messages and per-turn records) unless turned off, and items
without one (older files) still read and resume."""

from __future__ import annotations

import json

import pytest
from core_helpers import CounterEnv

from pivotgym.eval import evaluate_suite
from pivotgym.jsonl import read_jsonl
from pivotgym.registry import EnvSpec, get_registry
from pivotgym.types import Completion

MEMBER = "test/counter-v0@test"


class Scripted:
    """A sampler that plays ``replies`` in order (the last one repeats) and counts its calls."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.calls = 0

    def describe(self) -> dict[str, str]:
        return {"model": "scripted"}

    def sample(self, prompts, n=1, params=None):
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        return [[Completion(text, token_ids=[7] * 3, finish_reason="length")] for _ in prompts]


@pytest.fixture()
def counter(monkeypatch):
    monkeypatch.setitem(get_registry().envs, "test/counter-v0", EnvSpec("test/counter-v0", CounterEnv, "tests"))


def _items(out) -> list[dict]:
    return read_jsonl(str(out) + ".items.jsonl")


def test_items_hold_the_episode_transcript_by_default(counter, tmp_path):
    out = tmp_path / "s.json"
    evaluate_suite({MEMBER: "in_domain"}, Scripted("oops", "add 2"), out, limit=1, progress=False)
    (item,) = _items(out)
    transcript = item["transcript"]
    messages, steps = transcript["messages"], transcript["steps"]
    assert messages[0] == {"role": "user", "content": "Reach 103 with `add K`, K in 1..3."}
    assert [m["role"] for m in messages[1:5]] == ["assistant", "user", "assistant", "user"]
    assert messages[1]["content"] == "oops" and messages[2]["content"].startswith("Error: write `add K`")
    assert messages[4]["content"] == "value=2"
    assert len(steps) == item["turns"] == CounterEnv.max_turns
    assert steps[0]["info"]["error"] == "invalid_action" and steps[0]["reward"] == 0.0
    assert steps[-1]["truncated"] is True and steps[-1]["terminated"] is False
    assert steps[0]["finish_reason"] == "length" and steps[0]["tokens"] == 3


def test_transcripts_can_be_turned_off(counter, tmp_path):
    out = tmp_path / "s.json"
    evaluate_suite({MEMBER: "in_domain"}, Scripted("add 1"), out, limit=2, progress=False, transcripts=False)
    items = _items(out)
    assert len(items) == 2 and all("transcript" not in item for item in items)
    assert all(item["turns"] == CounterEnv.max_turns for item in items)


def test_single_turn_yaml_items_hold_prompt_and_reply(tmp_path):
    out = tmp_path / "s.json"
    evaluate_suite({"general/navigate-v0": "ood"}, Scripted("(A)"), out, limit=2, progress=False)
    for item in _items(out):
        messages = item["transcript"]["messages"]
        assert messages[-1] == {"role": "assistant", "content": "(A)"} and messages[0]["role"] in ("system", "user")
        (step,) = item["transcript"]["steps"]
        assert step["reward"] == item["reward"] and step["terminated"] is True


def test_items_without_transcripts_still_read_and_resume(counter, tmp_path):
    """An items file from before transcripts (or written with them off) is read and resumed as is."""
    out = tmp_path / "s.json"
    evaluate_suite({MEMBER: "in_domain"}, Scripted("add 1"), out, limit=2, progress=False, transcripts=False)
    sampler = Scripted("add 1")
    result = evaluate_suite({MEMBER: "in_domain"}, sampler, out, limit=2, progress=False)
    assert sampler.calls == 0 and result["scores"][MEMBER]["n"] == 2  # reused, no transcript needed
    # and a row in the oldest format (no transcript, no max_new_tokens) does not break reading
    path = tmp_path / "old.json.items.jsonl"
    path.write_text(
        json.dumps(
            {
                "member": MEMBER,
                "task_id": "test-100",
                "fingerprint": "x",
                "metric": "success",
                "reward": 0.0,
                "turns": 6,
            }
        )
        + "\n"
    )
    result = evaluate_suite({MEMBER: "in_domain"}, Scripted("add 1"), tmp_path / "old.json", limit=1, progress=False)
    assert result["scores"][MEMBER]["n"] == 1
