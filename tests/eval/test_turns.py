"""Turn accuracy of a sampler on held-out expert trajectories (pivotgym.eval.turns)."""

from __future__ import annotations

import pytest


class Scripted:
    """Answers each prompt with ``answer(prompt)``; ``None`` is a failed generation (finish_reason error)."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def sample(self, prompts, n=1, params=None):
        from pivotgym.types import Completion

        out = []
        for prompt in prompts:
            text = self.answer(prompt)
            completion = Completion(text="boom", finish_reason="error") if text is None else Completion(text=text)
            out.append([completion] * n)
        return out

    def describe(self):
        return {"model": "scripted", "revision": None, "backend": "test"}


def test_turn_accuracy_per_task_leaves_failed_verifications_out_and_counts_them(arith_registry):
    from pivotgym.eval.turns import turn_accuracy
    from pivotgym.registry import make
    from pivotgym.sampling.base import SamplingParams

    env = make("arith/chain-v0")
    trajectories = [t for t in env.expert_trajectories("test") if t.reward > 0][:3]
    turns = [turn for t in trajectories for turn in t.turns()]
    experts = {str(env.prompt_messages(turn.prefix)): turn.expert["content"] for turn in turns}
    first = {str(env.prompt_messages(turn.prefix)) for turn in trajectories[0].turns()}
    second = [str(env.prompt_messages(turn.prefix)) for turn in trajectories[1].turns()]
    states = len(turns)

    def answer(prompt):
        key = str(prompt)
        if key in first:
            return None
        if key in second:
            return experts[key] if key == second[0] else "nope"
        return experts[key]

    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    result = turn_accuracy(Scripted(answer), trajectories, params, executor="serial", chunk=2, progress=False)
    assert result.task_ids == [t.task_id for t in trajectories]
    assert result.per_task == [0.0, pytest.approx(1 / len(second)), 1.0]  # a task with no judged state scores 0
    assert result.states == states and result.failed == len(first)
    assert result.failed_by_task == {trajectories[0].task_id: len(first)}
    assert result.score == pytest.approx(sum(result.per_task) / 3)


def test_turn_accuracy_answers_short_histories_first_and_keeps_the_given_task_order(arith_registry):
    from pivotgym.eval.turns import turn_accuracy
    from pivotgym.registry import make
    from pivotgym.sampling.base import SamplingParams

    env = make("arith/chain-v0")
    chars: dict[int, object] = {}  # trajectories of distinct lengths, so that the shortest-first order is unique
    for t in env.expert_trajectories("test"):
        if t.reward > 0:
            chars.setdefault(sum(len(str(m["content"])) for m in t.messages), t)
    assert len(chars) >= 4, "the fixture needs four trajectories of different lengths"
    by_length = [chars[n] for n in sorted(chars)[:4]]
    given = by_length[::-1]  # longest first
    expert = {str(env.prompt_messages(turn.prefix)): turn.expert["content"] for t in given for turn in t.turns()}
    task_of = {str(env.prompt_messages(turn.prefix)): t.task_id for t in given for turn in t.turns()}
    seen: list[str] = []

    def answer(prompt):
        seen.append(task_of[str(prompt)])
        return expert[str(prompt)] if task_of[str(prompt)] == given[0].task_id else "nope"

    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    result = turn_accuracy(Scripted(answer), given, params, executor="serial", chunk=1, progress=False)
    order = list(dict.fromkeys(seen))
    assert order == [t.task_id for t in by_length]
    assert result.task_ids == [t.task_id for t in given]
    assert result.per_task == [1.0, 0.0, 0.0, 0.0]


def test_states_with_a_given_answer_are_judged_on_it_and_only_the_rest_generated(arith_registry):
    from pivotgym.eval.turns import turn_accuracy
    from pivotgym.registry import make
    from pivotgym.sampling.base import SamplingParams
    from pivotgym.types import Completion

    env = make("arith/chain-v0")
    trajectories = [t for t in env.expert_trajectories("test") if t.reward > 0][:2]
    turns = [turn for t in trajectories for turn in t.turns()]
    assert len(trajectories[1].turns()) >= 2, "the fixture needs a second trajectory of two or more states"
    expert = {str(env.prompt_messages(turn.prefix)): turn.expert["content"] for turn in turns}
    asked: list[str] = []

    class Encoding(Scripted):  # generates the expert's action; prompts encode to their text's bytes
        def encode(self, prompt):
            return list(str(prompt).encode())

    def answer(prompt):
        asked.append(str(prompt))
        return expert[str(prompt)]

    sampler = Encoding(answer)
    given = turns[: len(trajectories[0].turns()) + 1]  # trajectory 0 and the first state of trajectory 1
    answers = [Completion("nope", prompt_token_ids=sampler.encode(env.prompt_messages(t.prefix))) for t in given]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    result = turn_accuracy(sampler, trajectories, params, executor="serial", chunk=2, progress=False, answers=answers)
    generated = turns[len(given) :]
    assert sorted(asked) == sorted(str(env.prompt_messages(t.prefix)) for t in generated)
    assert result.states == len(turns) and result.answered == len(given) and result.failed == 0
    assert result.rewards == {(t.trajectory_id, t.turn): float(t in generated) for t in turns}
    rest = len(trajectories[1].turns())
    assert result.per_task == [0.0, pytest.approx((rest - 1) / rest)]
    with pytest.raises(ValueError, match="greedy"):
        turn_accuracy(sampler, trajectories, SamplingParams(temperature=1.0), executor="serial", answers=answers)
