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

    def load_tasks(self, split):
        right = [[["B"], ["A", "C"]], [["C", "D"], ["D"]]]
        return [Task(f"{split}-{i}", split, {"right": r}) for i, r in enumerate(right)]

    def initial_messages(self, task):
        self.pick = 0
        return [message("user", "Pick a letter: A, B, C or D.")]

    def apply_action(self, action):
        if action.strip() not in LETTERS:
            raise InvalidAction("reply with one of A, B, C, D")
        self.pick += 1
        done = self.pick == 2
        return StepOutcome([message("user", "Next pick." if not done else "Done.")], terminated=done)

    def legal_actions(self):
        return list(LETTERS)

    def expert_actions(self, task):
        return [message("assistant", right[0]) for right in task.data["right"]]


class PickVerifier:
    name = "likelihood-toy/right"
    version = "1"

    def verify(self, context, candidate):
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


def _independent_logps(sampler, messages, actions) -> list[float]:
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
        messages = env.prompt_messages(state.state.turn.prefix)
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
    from pivotgym.sampling.action_scores import action_logprobs

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
    from pivotgym.registry import make
    from pivotgym.sampling.action_scores import action_logprobs, action_tokens, chain_logprobs

    env = make(ENV_ID)
    stops = sorted(tiny_sampler.eos_ids)
    states = [s for s in pick_floors.states if s.task_id == "test-1"]
    prompts, actions = [], []
    for s in states:
        messages = env.prompt_messages(s.state.turn.prefix)
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


@pytest.fixture(scope="module")
def sharp_sampler() -> object:
    """The tiny Llama with weights ~N(0, 0.5): its greedy answers vary by prompt and step (the default
    initialisation repeats one token), so they show whether a decoder follows the right context."""
    import torch

    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in model.parameters():
            weight.copy_(torch.randn(weight.shape, generator=generator) * 0.5)
    return HFSampler(model, tokenizer=tokenizer)


def _argmax_loop(model, prompt, cap, stops):
    """Greedy decoding the slow way: the whole sequence through the model for every new token."""
    import torch

    answer: list[int] = []
    while len(answer) < cap and not (answer and answer[-1] in stops):
        with torch.no_grad():
            answer.append(int(model(input_ids=torch.tensor([[*prompt, *answer]])).logits[0, -1].argmax()))
    return answer


def test_greedy_answers_decoded_on_the_scoring_pass_equal_the_samplers_and_a_plain_argmax_loop(
    pick_floors, sharp_sampler
):
    from pivotgym.registry import make
    from pivotgym.sampling.action_scores import action_tokens, chain_scores
    from pivotgym.sampling.base import SamplingParams

    env = make(ENV_ID)
    model, stops = sharp_sampler.model, sorted(sharp_sampler.eos_ids)
    states = [s for s in pick_floors.states if s.task_id == "test-1"]
    messages = [env.prompt_messages(s.state.turn.prefix) for s in states]
    prompts = [sharp_sampler.encode(m) for m in messages]
    assert prompts[1][: len(prompts[0])] == prompts[0]  # one trunk, two states on it
    actions = [
        [action_tokens(sharp_sampler.tokenizer, m, p, a, stops)[0] for a in "ABCD"] for m, p in zip(messages, prompts)
    ]
    for cap in (1, 3, 8):
        scored = chain_scores(model, prompts, actions, stops, cap, decode=True)
        sampled = [
            c[0] for c in sharp_sampler.sample(messages, params=SamplingParams(temperature=0.0, max_new_tokens=cap))
        ]
        assert (
            [s.greedy for s in scored]
            == [c.token_ids for c in sampled]
            == [_argmax_loop(model, p, cap, stops) for p in prompts]
        )
        assert [s.finish for s in scored] == [c.finish_reason for c in sampled] == ["length", "length"]
        assert len(set(scored[1].greedy)) == len(scored[1].greedy) == cap  # a real sequence, not one token repeated
        plain = chain_scores(model, prompts, actions, stops, cap)
        assert [s.logp for s in scored] == [s.logp for s in plain] and plain[0].greedy == [] and plain[0].finish == ""
    # legal actions along the greedy answers: the answers start on the scoring pass's own branches and go on
    # from their tokens in the cache (the part read off the tree, then decoded), the same tokens either way
    want = [_argmax_loop(model, p, 8, stops) for p in prompts]
    along = [[*ls, w[:2], w[:5], [*w[:3], w[3] + 1]] for ls, w in zip(actions, want)]
    assert [s.greedy for s in chain_scores(model, prompts, along, stops, 8, decode=True)] == want
    assert [
        s.greedy
        for s in chain_scores(model, prompts, [[*ls, w] for ls, w in zip(actions, want)], stops, 8, decode=True)
    ] == want
    # a stop token ends the answer (here: pretend the third token of the first answer is one)
    third = chain_scores(model, prompts, actions, stops, 8, decode=True)[0].greedy[2]
    scored = chain_scores(model, prompts, actions, [*stops, third], 8, decode=True)
    assert scored[0].greedy == _argmax_loop(model, prompts[0], 8, {*stops, third}) and scored[0].finish == "stop"
    assert len(scored[0].greedy) == 3 and scored[1].greedy == _argmax_loop(model, prompts[1], 8, {*stops, third})
    on_tree = [[*actions[0], scored[0].greedy[:2]], actions[1]]  # a legal action, then greedy's stop token
    assert chain_scores(model, prompts, on_tree, [*stops, third], 8, decode=True)[0].greedy == scored[0].greedy
    # prompts that do not chain (second states of two tasks) are decoded one tree each, the same way
    other = next(s for s in pick_floors.states if s.task_id == "test-0" and s.turn == 1)
    split = [sharp_sampler.encode(env.prompt_messages(other.state.turn.prefix)), prompts[1]]
    assert split[0][: len(split[1])] != split[1] and split[1][: len(split[0])] != split[0]
    alone = chain_scores(model, split, [actions[1], actions[1]], stops, 3, decode=True)
    assert [s.greedy for s in alone] == [_argmax_loop(model, p, 3, stops) for p in split]
