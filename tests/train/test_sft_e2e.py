"""The SFT and end-to-end RL trainers on the arith env with the tiny model."""

from __future__ import annotations

import pytest
import torch
from train_testlib import register_test_verifier, write_arith_data

from pivotgym.errors import ConfigError
from pivotgym.jsonl import read_trajectories
from pivotgym.train import E2EConfig, E2ETrainer, SFTConfig, SFTTrainer


@pytest.fixture()
def arith_data(arith_registry, tmp_path):
    register_test_verifier()
    write_arith_data(tmp_path / "data", n_trajectories=2)
    return tmp_path / "data"


def _sft_config(arith_data, tmp_path, **fields) -> SFTConfig:
    """An SFT config on the arith expert trajectories, quiet, writing under ``tmp_path``."""
    base = {"output_dir": str(tmp_path / "sft"), "trajectories": str(arith_data / "expert.jsonl")}
    return SFTConfig(**base, report_to=["none"], progress=False, **fields)


def test_sft_masks_exactly_the_assistant_turns(arith_data):
    from pivotgym.registry import make
    from pivotgym.sampling.testing import smollm2_tokenizer
    from pivotgym.train.sft import build_examples

    tokenizer = smollm2_tokenizer()
    trajectory = read_trajectories(arith_data / "expert.jsonl")[0]
    (example,) = build_examples(trajectory, tokenizer, make("arith/chain-v0"), max_length=4096)
    trained = tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])
    answers = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    assert trained == "".join(a + "<|im_end|>" for a in answers)
    assert "Start with" not in trained  # user and system tokens carry no loss


def test_sft_max_length_counts_the_assistant_tokens_it_cuts(arith_data):
    from pivotgym.registry import make
    from pivotgym.sampling.testing import smollm2_tokenizer
    from pivotgym.train.sft import build_examples

    tokenizer, env = smollm2_tokenizer(), make("arith/chain-v0")
    trajectory = read_trajectories(arith_data / "expert.jsonl")[0]
    (whole,) = build_examples(trajectory, tokenizer, env, max_length=4096)
    first = whole.loss_mask.index(1)
    (cut,) = build_examples(trajectory, tokenizer, env, max_length=first)  # ends where the first answer starts
    assert cut.n_loss_tokens == 0 and cut.cut_loss_tokens == whole.n_loss_tokens
    assert whole.cut_loss_tokens == 0


def test_sft_refuses_a_max_length_that_leaves_nothing_to_train_on(arith_data, tmp_path):
    """A long system prompt (a tool-use policy with its schemas) can outrun max_length: every step would have
    been skipped in silence; now the trainer says so before training."""
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=5)
    config = _sft_config(arith_data, tmp_path, steps=1, max_length=8)
    with pytest.raises(ConfigError, match="max_length 8 cuts every assistant token"):
        SFTTrainer(config, model=model, tokenizer=tokenizer).fit()
    from pivotgym.registry import make
    from pivotgym.train.sft import build_examples

    trajectory = read_trajectories(arith_data / "expert.jsonl")[0]
    (whole,) = build_examples(trajectory, tokenizer, make("arith/chain-v0"), max_length=4096)
    config.max_length = whole.loss_mask.index(1) + 2  # some assistant tokens left: trains, warns about the rest
    config.output_dir = str(tmp_path / "sft2")
    with pytest.warns(UserWarning, match=f"max_length {config.max_length} cuts"):
        SFTTrainer(config, model=model, tokenizer=tokenizer).fit()


def test_sft_lowers_the_loss_on_expert_turns(arith_data, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=5)
    config = _sft_config(arith_data, tmp_path, steps=6, trajectories_per_step=2, learning_rate=1e-2, micro_batch_size=1)
    trainer = SFTTrainer(config, model=model, tokenizer=tokenizer)
    summary = trainer.fit()
    losses = [r["loss"] for r in trainer.history if r["kind"] == "train"]
    assert losses[-1] < losses[0]
    assert summary["counters"]["tokens_trained"] == sum(
        r["tokens_in_loss"] for r in trainer.history if r["kind"] == "train"
    )
    assert summary["counters"]["rollout_turns"] == 0 and summary["counters"]["tokens_generated"] == 0


def test_e2e_runs_episodes_and_counts_turns(arith_data, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=6)
    before = [p.detach().clone() for p in model.parameters()]
    config = E2EConfig(
        output_dir=str(tmp_path / "e2e"),
        env_id="arith/chain-v0",
        steps=1,
        tasks_per_step=2,
        group_size=2,
        max_turns=2,
        max_new_tokens=4,
        eval_tasks=1,
        eval_samples=1,
        report_to=["none"],
        progress=False,
    )
    trainer = E2ETrainer(config, model=model, tokenizer=tokenizer)
    summary = trainer.fit()
    counters = summary["counters"]
    # a random model never answers right: every episode runs to the turn cap with return 0 -> all filtered,
    # so the step draws its 4 refill tasks too (2 + 4 tasks x 2 episodes x 2 turns), and skips its update
    assert counters["filtered_turns"] == (2 + 4) * 2 * 2 and counters["rollout_turns"] == 0
    (row,) = [r for r in trainer.history if r["kind"] == "train"]
    assert (row["refill_tasks"], row["groups"], row["groups_informative"], row["skipped"]) == (4, 6, 0, 1)
    assert (row["episodes"], row["turns"]) == (12, 24)
    # evals before and after, 1 task x 1 episode x 8 turns: the env's own limit, not the training cap of 2
    assert counters["eval_turns"] == 2 * 1 * 8
    assert summary["final_eval"]["score"] == 0.0
    assert counters["seconds_verification"] > 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_e2e_episodes_batch_across_tasks_without_changing_any_episode(arith_data, tmp_path):
    from pivotgym.env import AgentEnv
    from pivotgym.registry import make
    from pivotgym.sampling.testing import tiny_llama
    from pivotgym.train.e2e import run_episodes

    model, tokenizer = tiny_llama(seed=6)
    trainer = E2ETrainer(
        E2EConfig(
            output_dir=str(tmp_path / "e2e"),
            env_id="arith/chain-v0",
            steps=1,
            max_new_tokens=4,
            report_to=["none"],
            progress=False,
        ),
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup_data()
    calls: list[int] = []
    sample = trainer.sampler.sample
    trainer.sampler.sample = lambda prompts, **kw: calls.append(len(prompts)) or sample(prompts, **kw)
    first, second = trainer.task_ids[:2]
    params = trainer._params()
    both = run_episodes(trainer, "arith/chain-v0", [(first, 11), (second, 22)], 3, params, max_turns=2)
    assert calls == [2, 6]  # turn 0: one shared prompt per task (n=3); turn 1: every live episode once
    alone = run_episodes(trainer, "arith/chain-v0", [(second, 22)], 3, params, max_turns=2)
    assert [e.turns for e in both[1]] == [e.turns for e in alone[0]]
    assert len({tuple(e.turns[0][1]) for e in both[0]}) > 1  # the 3 episodes of a task draw different samples
    env = make("arith/chain-v0")
    assert isinstance(env.unwrapped, AgentEnv)
    env.reset(options={"task_id": second})
    assert both[1][0].turns[0][0] == trainer.sampler.encode(env.unwrapped.prompt_messages(env.unwrapped.messages))
