"""The reasoning envs: discovery, deterministic and disjoint splits, scoring by reasoning-gym's scorers, the
functional verifier, and a suite row with a parse rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pivotgym_reasoning.tasks import TASKS, TEST_SIZE, env_id

from pivotgym.errors import ConfigError, InvalidAction
from pivotgym.parsing.answers import normalize_answer
from pivotgym.registry import make
from pivotgym.types import Completion

ENV_IDS = [env_id(name) for name in TASKS]
#: not imported from the plugin module: importing a hook module before the registry loads hides its hooks
SUITE = "ood-reasoning"


def test_plugin_registers_every_env_its_verifier_and_the_suite(registry):
    for eid in ENV_IDS:
        spec = registry.env_spec(eid)
        assert spec.verifier == "reasoning/answer" and spec.splits == ("train", "test")
    assert "reasoning/answer" in registry.verifiers
    members = registry.suite(SUITE).members
    assert members and all(role == "ood" for role in members.values())
    assert set(members) == {f"{env_id(n)}@test" for n, spec in TASKS.items() if spec.in_suite}


def test_pivotgym_envs_lists_them(registry):
    exe = Path(sys.executable).with_name("pivotgym")
    proc = subprocess.run([str(exe), "envs"], capture_output=True, text=True, env={**os.environ}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for eid in ENV_IDS:
        assert eid in proc.stdout


@pytest.mark.parametrize("eid", ENV_IDS)
def test_env_passes_the_contract_checks(registry, eid):
    """`pivotgym check`: gymnasium's checker, determinism, malformed actions, expert replay, the verifier on
    the expert's answer, reward-hacking probes (control characters among them) and a legal wrong answer."""
    import pivotgym

    report = pivotgym.check_env(eid, n_experts=2)
    report.raise_for_failures()
    assert "verifier_wrong_action" in {r.name for r in report.results if r.status == "pass"}


@pytest.mark.parametrize("eid", ENV_IDS)
def test_splits_are_deterministic_disjoint_and_full(registry, eid):
    env, again = make(eid), make(eid)
    test, train = env.tasks("test"), env.tasks("train")
    assert [t.data for t in test] == [t.data for t in again.tasks("test")]
    assert len(test) == TEST_SIZE and len({t.id for t in test}) == TEST_SIZE
    questions = {normalize_answer(t.data["input"]) for t in test}
    assert len(questions) == TEST_SIZE  # unique within the split
    assert train and not questions & {normalize_answer(t.data["input"]) for t in train}
    assert {t.id for t in test}.isdisjoint({t.id for t in train})
    json.dumps([t.data for t in test[:20]])  # tasks travel as JSON (trajectories, suite items)


@pytest.mark.parametrize("eid", ENV_IDS)
def test_gold_answer_passes_and_a_wrong_one_fails(registry, eid):
    env = make(eid)
    tasks = env.tasks("test")[:20]
    for task in tasks:
        gold = task.data["target"][0]
        env.check_reply(task, gold)
        assert env.judge(task, gold)[0] == 1.0
        # another task's gold answer is wrong here unless the two happen to share it
        other = next(t for t in tasks if normalize_answer(t.data["target"][0]) != normalize_answer(gold))
        reward, details = env.judge(task, other.data["target"][0])
        assert reward == 0.0 and details["score"] < 1.0


def test_replies_are_read_in_their_usual_forms(registry):
    env = make("reasoning/basic-arithmetic-v0")
    task = env.tasks("test")[0]
    gold = task.data["target"][0]
    expression = task.data["input"].removeprefix("Calculate").strip().rstrip(".")
    for reply in (gold, f"{expression} = {gold}", f"The answer is {gold}."):
        assert env.judge(task, reply)[0] == 1.0, reply
    sort = make("reasoning/number-sorting-v0")
    task = sort.tasks("test")[0]
    numbers = json.loads(task.data["target"][0].replace("'", '"'))
    bare = ", ".join(n.removesuffix(".0") for n in numbers)
    assert sort.judge(task, bare)[0] == 1.0 and sort.judge(task, f"[{bare}]")[0] == 1.0
    assert sort.judge(task, ", ".join(reversed(numbers)))[0] == 0.0


def test_a_reply_without_an_answer_is_an_invalid_action(registry):
    env = make("reasoning/letter-counting-v0")
    task = env.tasks("test")[0]
    with pytest.raises(InvalidAction) as err:
        env.check_reply(task, "I am not sure about that.")
    assert err.value.code == "no_answer"
    assert env.judge(task, "I am not sure about that.") == (0.0, {"error": "no_answer", "answer": None})
    assert env.judge(task, "1" * 5000)[1]["error"].startswith("action_too_long")


@pytest.mark.parametrize("eid", ENV_IDS)
def test_judging_never_raises_on_hostile_replies(registry, eid):
    env = make(eid)
    task = env.tasks("test")[0]
    for reply in ("\ud800", "[" * 3000, "1, " * 1300, "= -" * 900, "9" * 3999, "a-" * 1999):
        reward, details = env.judge(task, reply)
        assert reward in (0.0, 1.0) and isinstance(details, dict)
    gold = task.data["target"][0]
    assert env.judge(task, f"\x00\x1b[{gold}") == (0.0, {"error": "malformed: control characters"})


def test_an_episode_is_one_turn_in_the_chat_format(registry):
    env = make("reasoning/spell-backward-v0")
    obs, _ = env.reset(options={"task_id": env.tasks("test")[3].id})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert obs[0]["content"].count("Example question:") == 2
    assert obs[1]["content"] == env.tasks("test")[3].data["input"]
    _, reward, terminated, _, info = env.step(env.tasks("test")[3].data["target"][0])
    assert reward == 1.0 and terminated and info["correct"]


def test_the_verifier_credits_any_answer_the_scorer_accepts(registry):
    from pivotgym.registry import verifier_for
    from pivotgym.types import Trajectory
    from pivotgym.verify import VerifyContext

    eid = "reasoning/basic-arithmetic-v0"
    trajectory = next(iter(make(eid).expert_trajectories("test", limit=1)))
    turn = Trajectory.from_dict(trajectory.to_dict()).turn(0)
    gold = turn.expert["content"]
    context = VerifyContext(turn)
    functional, exact = verifier_for(eid), verifier_for(eid, kind="exact")
    assert functional.verify(context, f"x = {gold}").equivalent
    assert functional.verify(context, f"The answer is {gold}.").equivalent
    assert not functional.verify(context, str(int(gold) + 1)).equivalent
    assert not exact.verify(context, f"x = {gold}").equivalent


def test_levels_and_sizes_are_checked(registry):
    with pytest.raises(ConfigError, match="unknown level"):
        make("reasoning/leg-counting-v0", level="impossible")
    with pytest.raises(ConfigError, match="distinct questions"):
        make("reasoning/basic-arithmetic-v0", level="2x1digit", test_size=300).tasks("test")


class OddOnesOut:
    """A sampler that answers every other prompt with the gold answer (found by question) and the rest with
    prose that holds no answer."""

    def __init__(self, gold: dict[str, str]) -> None:
        self.gold = gold
        self.calls = 0

    def describe(self) -> dict[str, str]:
        return {"model": "odd-ones-out"}

    def sample(self, prompts, n=1, params=None):
        out = []
        for prompt in prompts:
            self.calls += 1
            text = self.gold[prompt[-1]["content"]] if self.calls % 2 else "Let me think about it."
            out.append([Completion(text, token_ids=[1], finish_reason="stop")])
        return out


def test_a_suite_row_reports_parse_rate_beside_accuracy(registry, tmp_path):
    from pivotgym.eval import evaluate_suite

    eid = "reasoning/word-sequence-reversal-v0"
    gold = {t.data["input"]: t.data["target"][0] for t in make(eid).tasks("test")}
    result = evaluate_suite({f"{eid}@test": "ood"}, OddOnesOut(gold), tmp_path / "r.json", limit=10, progress=False)
    score = result["scores"][f"{eid}@test"]
    assert score["metric"] == "accuracy" and score["n"] == 10
    assert score["value"] == pytest.approx(0.5) and score["parse_rate"] == pytest.approx(0.5)
