"""Likelihood scores of legal actions (pivotgym.eval.likelihood) with the tiny HF model and a toy env whose legal
and credited actions are known."""

from __future__ import annotations

import math
import types
from collections.abc import Iterator

import pytest

import pivotgym
from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task, Verdict
from pivotgym.types import message

ENV_ID = "likelihood-toy/pick-v0"
LETTERS = ["A", "B", "C", "D"]


class PickEnv(AgentEnv):
    """Two picks per task from A-D; the task names the letters that are right at each pick (one or two)."""

    splits = ("train", "test")
    max_turns = 4
    max_new_tokens = 8

    def load_tasks(self, split):  # noqa: ANN001, ANN201
        right = [[["B"], ["A", "C"]], [["C", "D"], ["D"]]]
        return [Task(f"{split}-{i}", split, {"right": r}) for i, r in enumerate(right)]

    def initial_messages(self, task):  # noqa: ANN001, ANN201
        self.pick = 0
        return [message("user", "Pick a letter: A, B, C or D.")]

    def apply_action(self, action):  # noqa: ANN001, ANN201
        if action.strip() not in LETTERS:
            raise InvalidAction("reply with one of A, B, C, D")
        self.pick += 1
        done = self.pick == 2
        return StepOutcome([message("user", "Next pick." if not done else "Done.")], terminated=done)

    def legal_actions(self):  # noqa: ANN201
        return list(LETTERS)

    def expert_actions(self, task):  # noqa: ANN001, ANN201
        return [message("assistant", right[0]) for right in task.data["right"]]


class PickVerifier:
    name = "likelihood-toy/right"
    version = "1"

    def verify(self, context, candidate):  # noqa: ANN001, ANN201
        env = context.env()
        ok = candidate.strip() in env.task.data["right"][env.pick]
        return Verdict(float(ok), ok, "right" if ok else "wrong")


@pytest.fixture()
def pick_floors() -> Iterator[object]:
    from pivotgym.eval.floors import floors
    from pivotgym.plugins import PluginManager
    from pivotgym.registry import Registry, reset_registry

    mod = types.ModuleType("likelihood_toy_plugin")
    mod.register_environments = pivotgym.hookimpl(
        lambda register: register(ENV_ID, PickEnv, verifier=PickVerifier.name)
    )
    mod.register_verifiers = pivotgym.hookimpl(lambda register: register(PickVerifier.name, PickVerifier))
    pm = PluginManager()
    pm.load_builtins()
    pm.add(mod, "likelihood-toy")
    reset_registry(Registry.from_plugins(pm))
    try:
        yield floors(ENV_ID, "test", executor="serial", progress=False)
    finally:
        reset_registry()


def _independent_logps(sampler, messages, actions) -> list[float]:  # noqa: ANN001
    """log p(action, then <|im_end|>) for each action by plain forwards over the whole conversations (no cache,
    no shared prefix, no padding: the toy's actions have equal length, so they batch without it)."""
    import torch

    tok = sampler.tokenizer
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    rows = []
    for action in actions:
        whole = tok.apply_chat_template(
            [*messages, {"role": "assistant", "content": action}],
            add_generation_prompt=False,
            tokenize=True,
            return_dict=False,
        )
        assert whole[: len(prompt)] == prompt
        rows.append(whole[: whole.index(tok.convert_tokens_to_ids("<|im_end|>"), len(prompt)) + 1])
    ids = torch.tensor(rows)
    with torch.no_grad():
        logp = torch.log_softmax(sampler.model(input_ids=ids).logits.double(), dim=-1)
    return [float(sum(logp[r, j - 1, ids[r, j]] for j in range(len(prompt), ids.shape[1]))) for r in range(len(rows))]


def test_each_legal_action_scores_its_teacher_forced_probability_and_the_masses_add_up(pick_floors, tiny_sampler):
    from pivotgym.eval.likelihood import likelihood_scores
    from pivotgym.registry import make

    env = make(ENV_ID)
    result = likelihood_scores(tiny_sampler, pick_floors, env, progress=False)
    assert len(result.states) == 4 and result.task_ids == ["test-0", "test-1"]
    assert result.tokenization == {"template": 16, "plain": 0, "over_cap": 0}
    judged = [s for s in pick_floors.states if s.judged]
    for row, state in zip(result.states, judged):
        assert row.credited == state.credited
        messages = env.prompt_messages(state.state.prefix)
        assert row.logp == pytest.approx(_independent_logps(tiny_sampler, messages, state.legal), abs=1e-4)
        assert 0 < row.p_credited <= row.p_legal <= 1
        assert row.p_credited == pytest.approx(sum(math.exp(v) for v, ok in zip(row.logp, row.credited) if ok))
        assert row.p_legal == pytest.approx(sum(math.exp(v) for v in row.logp))
    # task 0: B at the first pick, A or C at the second
    assert [s.credited for s in result.states[:2]] == [[False, True, False, False], [True, False, True, False]]
    first = result.states[:2]
    assert result.per_task["p_credited"][0] == pytest.approx((first[0].p_credited + first[1].p_credited) / 2)
    assert result.p_credited <= result.p_legal
    out = result.to_dict(states=True)
    assert out["metrics"]["p_credited"]["n"] == 2 and len(out["state_rows"]) == 4


def test_an_action_longer_than_the_generation_cap_cannot_be_emitted(pick_floors, tiny_sampler):
    from pivotgym.eval.likelihood import action_logprobs

    prompt = tiny_sampler.encode([{"role": "user", "content": "hi"}])
    stops = sorted(tiny_sampler.eos_ids)
    short, long = [330], [330, 331, 332]
    free = action_logprobs(tiny_sampler.model, prompt, [short, long], stops, cap=None)
    capped = action_logprobs(tiny_sampler.model, prompt, [short, long], stops, cap=2)
    assert capped[0] == pytest.approx(free[0]) and capped[1] == -math.inf
    exact = action_logprobs(tiny_sampler.model, prompt, [long], stops, cap=3)
    assert exact[0] > free[1]  # at the cap the sampler stops on length: no stop token to pay for


def test_likelihood_refuses_a_sampler_without_a_model(pick_floors):
    from pivotgym.errors import SamplerError
    from pivotgym.eval.likelihood import likelihood_scores

    with pytest.raises(SamplerError, match="transformers model"):
        likelihood_scores(object(), pick_floors, progress=False)


def test_a_trajectorys_states_scored_from_one_prefill_equal_one_forward_per_state(pick_floors, tiny_sampler):
    from pivotgym.eval.likelihood import action_logprobs, action_tokens, chain_logprobs
    from pivotgym.registry import make

    env = make(ENV_ID)
    stops = sorted(tiny_sampler.eos_ids)
    states = [s for s in pick_floors.states if s.task_id == "test-1"]
    prompts, actions = [], []
    for s in states:
        messages = env.prompt_messages(s.state.prefix)
        prompts.append(tiny_sampler.encode(messages))
        actions.append([action_tokens(tiny_sampler.tokenizer, messages, prompts[-1], a, stops)[0] for a in s.legal])
    assert prompts[1][: len(prompts[0])] == prompts[0]  # the chain the shared prefill relies on
    actions[0][1] = actions[0][1] + [330, 331]  # actions of unequal length: padding must not leak in
    chained = chain_logprobs(tiny_sampler.model, prompts, actions, stops, None)
    alone = [action_logprobs(tiny_sampler.model, p, a, stops, None) for p, a in zip(prompts, actions)]
    for got, want in zip(chained, alone):
        assert got == pytest.approx(want, abs=1e-4)
    capped = chain_logprobs(tiny_sampler.model, prompts, actions, stops, 2)
    assert capped[0][1] == -math.inf and capped[0][0] == pytest.approx(alone[0][0], abs=1e-4)


def test_the_scores_name_the_action_greedy_decoding_emits_and_leave_the_rest_to_generation(pick_floors, tiny_sampler):
    from pivotgym.eval.likelihood import action_tokens, chain_scores
    from pivotgym.registry import make
    from pivotgym.sampling.base import SamplingParams

    env = make(ENV_ID)
    stops = sorted(tiny_sampler.eos_ids)
    states = [s for s in pick_floors.states if s.task_id == "test-1"]
    messages = [env.prompt_messages(s.state.prefix) for s in states]
    prompts = [tiny_sampler.encode(m) for m in messages]
    letters = [
        [action_tokens(tiny_sampler.tokenizer, m, p, a, stops)[0] for a in "ABCD"] for m, p in zip(messages, prompts)
    ]
    for cap in (3, 6):  # the tiny model never stops: greedy emits exactly `cap` tokens (the stop branch: below)
        emitted = [
            c[0] for c in tiny_sampler.sample(messages, params=SamplingParams(temperature=0.0, max_new_tokens=cap))
        ]
        greedy = [c.token_ids for c in emitted]  # the real generation path
        assert {c.finish_reason for c in emitted} == {"length"} and {len(g) for g in greedy} == {cap}
        other_last = [[*g[:-1], g[-1] + 1] for g in greedy]
        # per state: the letters, a prefix of greedy's tokens, greedy's tokens, greedy's with another last token
        actions = [[*ls, g[:-1], g, o] for ls, g, o in zip(letters, greedy, other_last)]
        assert [s.greedy for s in chain_scores(tiny_sampler.model, prompts, actions, stops, cap)] == [5, 5]
        # one state at a time (prompts that do not chain) decides the same
        assert [chain_scores(tiny_sampler.model, [p], [a], stops, cap)[0].greedy for p, a in zip(prompts, actions)] == [
            5,
            5,
        ]
        # without greedy's own tokens among the actions nothing is decided: generation has to answer
        without = [[*ls, g[:-1], o] for ls, g, o in zip(letters, greedy, other_last)]
        assert [s.greedy for s in chain_scores(tiny_sampler.model, prompts, without, stops, cap)] == [None, None]


def _walk(table, actions, cap=None, stops=(0, 1)):  # noqa: ANN001, ANN202
    """``_greedy_action`` over made-up logits: ``table[tokens so far]`` = the top two (token, logp) there."""
    from pivotgym.eval.likelihood import _greedy_action, _Tree

    tree = _Tree([7, 8])
    reads = [tree.add(2, list(a), cap) for a in actions]
    fed: dict[int, tuple[int, ...]] = {1: ()}  # sequence index -> the action tokens its logits follow
    for a, read in zip(actions, reads):
        if read is not None:
            for j, index in enumerate(read.at):
                fed[index] = tuple(a[:j])
            if read.stop_at is not None:
                fed[read.stop_at] = tuple(a)

    def best(index):  # noqa: ANN001, ANN202
        (t1, v1), (t2, v2) = table[fed[index]]
        return [t1, t2], [v1, v2]

    return _greedy_action(1, actions, reads, best, set(stops), cap)


def test_the_greedy_walk_follows_the_argmax_to_a_stop_and_gives_up_off_the_actions_or_on_a_near_tie():
    actions = [[5, 6], [5, 6, 9], [4]]
    top = {(): ((5, -0.1), (4, -2.0)), (5,): ((6, -0.2), (9, -3.0)), (5, 6): ((1, -0.3), (9, -1.0))}
    assert _walk(top, actions) == 0  # 5, 6, then a stop token
    assert _walk({**top, (5, 6): ((9, -0.3), (1, -1.0)), (5, 6, 9): ((0, -0.1), (1, -0.2))}, actions) == 1
    assert _walk({**top, (5, 6): ((9, -0.3), (1, -1.0)), (5, 6, 9): ((3, -0.1), (1, -2.0))}, actions) is None
    assert _walk({**top, (5, 6): ((1, -0.3), (0, -0.301))}, actions) == 0  # a tie between two stops is no doubt
    assert _walk({**top, (5,): ((6, -0.2), (9, -0.205))}, actions) is None  # a near tie is left to generation
    assert _walk({**top, (): ((3, -0.1), (4, -2.0))}, actions) is None  # off the actions at once
    assert _walk({**top, (5,): ((1, -0.2), (6, -3.0))}, actions) is None  # stops after 5: no action is [5]
    assert _walk(top, actions, cap=2) == 0  # at the cap greedy stops on length after 5, 6
    assert _walk(top, [[5, 6, 9], [4]], cap=2) is None  # ... which only an action of exactly 2 tokens matches
