"""The E2E trainer's own mechanics: one packed sequence per episode (same loss and gradient as one sample per
turn), refills of groups without signal, and the optional partial-progress reward."""

from __future__ import annotations

import pytest
import torch

from pivotgym import AgentEnv, StepOutcome, Task
from pivotgym.errors import ConfigError
from pivotgym.registry import EnvSpec, get_registry
from pivotgym.rollout import Episode
from pivotgym.train import E2EConfig, E2ETrainer
from pivotgym.train.e2e import pack_episode
from pivotgym.train.loop import DataOrder
from pivotgym.types import message


class ParityEnv(AgentEnv):
    """Three turns, whatever the replies; the return is 1 when the last reply has an even length. Progress is
    the share of even-length replies so far (a partial-progress signal for the tiny random model)."""

    splits = ("train", "test")
    max_turns = 3
    max_new_tokens = 4

    def load_tasks(self, split):
        return [Task(f"{split}-{i}", split, {}) for i in range(6)]

    def initial_messages(self, task):
        self.even = 0
        return [message("user", f"Task {task.id}: say anything.")]

    def apply_action(self, action):
        self.even += len(action) % 2 == 0
        last = self.turn >= self.max_turns
        reward = float(len(action) % 2 == 0) if last else 0.0
        return StepOutcome([message("user", f"turn {self.turn} noted")], reward=reward, terminated=last)

    def progress(self):
        return self.even / self.max_turns


class NoProgressEnv(ParityEnv):
    def progress(self):
        return None


class ExpertParityEnv(ParityEnv):
    """ParityEnv with an expert who answers `ok` every turn (even length: the return is 1)."""

    def expert_actions(self, task):
        return [message("assistant", "ok") for _ in range(self.max_turns)]


@pytest.fixture()
def toy_envs(monkeypatch):
    registry = get_registry()
    monkeypatch.setitem(registry.envs, "test/parity-v0", EnvSpec("test/parity-v0", ParityEnv, "tests"))
    monkeypatch.setitem(registry.envs, "test/noprogress-v0", EnvSpec("test/noprogress-v0", NoProgressEnv, "tests"))
    monkeypatch.setitem(registry.envs, "test/expert-v0", EnvSpec("test/expert-v0", ExpertParityEnv, "tests"))
    return registry


def _trainer(tmp_path, **overrides):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=3)
    fields = dict(
        output_dir=str(tmp_path / "e2e"),
        env_id="test/parity-v0",
        steps=1,
        tasks_per_step=1,
        group_size=8,
        eval_tasks=1,
        eval_samples=1,
        optimizer="sgd",
        learning_rate=1e-3,
        report_to=["none"],
        progress=False,
        save_final_model=False,
        track_drift=False,
    )
    fields.update(overrides)
    return E2ETrainer(E2EConfig(**fields), model=model, tokenizer=tokenizer)


# ---------------------------------------------------------------------------- packing
def test_a_prefix_consistent_episode_packs_into_one_sequence_with_observations_masked():
    p1, c1, o1, c2, o2, c3 = [5, 6, 7], [8, 9], [10], [11, 12, 13], [14, 15], [16]
    turns = [(p1, c1), (p1 + c1 + o1, c2), (p1 + c1 + o1 + c2 + o2, c3)]
    (packed,) = pack_episode(turns)
    assert packed.prompt_ids == p1 and packed.turns == 3
    assert packed.completion_ids == c1 + o1 + c2 + o2 + c3
    assert packed.loss_mask == [1, 1, 0, 1, 1, 1, 0, 0, 1]


def test_a_history_that_is_not_prefix_consistent_is_cut_where_it_breaks():
    p1, c1 = [5, 6, 7], [8, 9]
    retokenised = [5, 6, 7, 99, 10]  # the template re-encoded completion 1 differently
    turns = [(p1, c1), (retokenised, [11]), (retokenised + [11, 12], [13])]
    first, second = pack_episode(turns)
    assert (first.prompt_ids, first.completion_ids, first.turns) == (p1, c1, 1)
    assert (second.prompt_ids, second.completion_ids, second.loss_mask, second.turns) == (
        retokenised,
        [11, 12, 13],
        [1, 0, 1],
        2,
    )


def _grads(trainer, samples):
    trainer.model.zero_grad(set_to_none=True)
    batches, tokens = trainer.prepare_batches(samples)
    trainer.accumulate_gradients(batches, tokens)
    return tokens, [p.grad.detach().clone() for p in trainer.model.parameters() if p.grad is not None]


def test_the_packed_sequence_has_the_per_turn_samples_logprobs_loss_and_gradient(tmp_path, toy_envs):
    trainer = _trainer(tmp_path)
    g = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(100, 40_000, (n,), generator=g).tolist()

    episodes, first_prompt = [], ids(12)  # two episodes of one task
    for advantage in (0.9, -0.6):
        p, turns = list(first_prompt), []
        for n_completion, n_observation in ((5, 4), (7, 6), (3, 0)):
            completion = ids(n_completion)
            turns.append((list(p), completion))
            p = p + completion + ids(n_observation)
        episodes.append((Episode("t", turns=turns), advantage))
    packed, per_turn = [], []
    for episode, advantage in episodes:
        trainer.config.pack_episodes = True
        made, breaks = trainer.episode_samples(episode, advantage, 1.0)
        assert len(made) == 1 and breaks == 0
        packed += made
        trainer.config.pack_episodes = False
        per_turn += trainer.episode_samples(episode, advantage, 1.0)[0]
    assert len(per_turn) == 6
    # same token logprobs: every completion token of the packed sequence against its per-turn sample's
    from pivotgym.train.rl import make_micro_batches

    with torch.no_grad():
        (mb,) = make_micro_batches(packed, 8)  # both episodes share their first prompt: one forward
        logp, mask = trainer._logprobs(trainer.model, mb)
        for row in range(len(episodes)):
            packed_lp = logp[row][mask[row].bool()]
            turns = make_micro_batches(per_turn[3 * row :][:3], 1)
            turn_lp = [trainer._logprobs(trainer.model, b)[0][0] for b in turns]
            assert torch.allclose(packed_lp, torch.cat(turn_lp), atol=1e-5)
    packed_tokens, packed_grads = _grads(trainer, packed)
    turn_tokens, turn_grads = _grads(trainer, per_turn)
    assert packed_tokens == turn_tokens == 2 * (5 + 7 + 3)  # observation tokens are not in the denominator
    assert len(packed_grads) == len(turn_grads) > 0
    for a, b in zip(packed_grads, turn_grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    assert any(a.abs().max() > 0 for a in packed_grads)


# ---------------------------------------------------------------------------- refills and rewards
def test_groups_without_signal_are_refilled_up_to_the_bound_and_every_turn_counts(tmp_path, toy_envs):
    trainer = _trainer(tmp_path, env_id="test/noprogress-v0", group_size=2, tasks_per_step=2, refill_tasks=2)
    trainer.setup_data()
    row = trainer.train_step(0)
    assert row["groups"] == 2 + row["refill_tasks"] and 0 <= row["refill_tasks"] <= 2
    assert row["episodes"] == 2 * row["groups"] and row["turns"] == 3 * row["episodes"]
    assert row["groups_informative"] >= 2 or row["refill_tasks"] == 2  # stopped by the goal or the bound
    assert trainer.data_state["cursor"] == row["groups"]
    c = trainer.counters
    assert c.rollout_turns + c.filtered_turns == row["turns"] == 3 * 2 * row["groups"]
    assert c.filtered_turns == 3 * 2 * (row["groups"] - row["groups_informative"])
    assert c.refill_groups == row["refill_tasks"]  # the cumulative counter of the spend table
    assert trainer.train_step(1) and c.refill_groups >= row["refill_tasks"]
    assert row["samples"] == 2 * row["groups_informative"] + row["packing_breaks"]


def test_refills_stop_at_tasks_per_step_informative_groups_and_repeat_by_seed(tmp_path, toy_envs):
    rows = []
    for run in ("a", "b"):
        trainer = _trainer(tmp_path / run, tasks_per_step=2, refill_tasks=4)
        trainer.setup_data()
        rows.append(trainer.train_step(0))
    row = rows[0]
    assert row["groups_informative"] == 2  # group size 8 of parity returns: mixed within a few draws
    assert row["refill_tasks"] == row["groups"] - 2 < 4
    keys = ("groups", "refill_tasks", "episodes", "turns", "samples", "reward_mean", "packing_breaks", "loss")
    assert {k: rows[0][k] for k in keys} == {k: rows[1][k] for k in keys}


def test_the_progress_reward_reads_the_envs_progress_and_a_solved_episode_gets_1(tmp_path, toy_envs):
    trainer = _trainer(tmp_path, reward="progress")
    assert trainer.episode_return(Episode("t", rewards=[0.0, 0.0], progress=0.25)) == 0.25
    assert trainer.episode_return(Episode("t", rewards=[0.0, 1.0], progress=0.5)) == 1.0
    trainer.setup_data()
    row = trainer.train_step(0)
    assert 0.0 <= row["solved_rate"] <= 1.0
    # the step's returns are thirds (the share of even replies), not only 0/1
    assert row["reward_mean"] * row["episodes"] * 3 == pytest.approx(round(row["reward_mean"] * row["episodes"] * 3))
    outcome = _trainer(tmp_path / "o")
    assert outcome.episode_return(Episode("t", rewards=[0.0, 0.0], progress=0.25)) == 0.0


def test_the_progress_reward_without_the_hook_names_the_env(tmp_path, toy_envs):
    trainer = _trainer(tmp_path, env_id="test/noprogress-v0", reward="progress")
    trainer.setup_data()
    with pytest.raises(ConfigError, match="test/noprogress-v0 reports no progress"):
        trainer.train_step(0)
    with pytest.raises(ConfigError, match="reward: must be one of outcome, progress"):
        E2EConfig(env_id="x", reward="shaped").validate()


# ---------------------------------------------------------------------------- start states
def test_expert_starts_replay_a_seeded_uniform_prefix_of_the_expert_plan_per_group(tmp_path, toy_envs):
    trainer = _trainer(tmp_path, env_id="test/expert-v0", start="expert")
    prefixes = [trainer.start_prefix("train-0", step, draw) for step in range(10) for draw in range(4)]
    assert {len(p) for p in prefixes} == {0, 1, 2}  # every turn of the 3-turn plan, never past its last
    assert all(p == ["ok"] * len(p) for p in prefixes)
    again = _trainer(tmp_path / "again", env_id="test/expert-v0", start="expert")
    assert [again.start_prefix("train-0", step, draw) for step in range(10) for draw in range(4)] == prefixes
    assert _trainer(tmp_path / "reset", env_id="test/expert-v0").start_prefix("train-0", 3, 1) == []


def test_a_step_from_expert_states_samples_only_the_turns_after_the_replayed_prefix(tmp_path, toy_envs):
    trainer = _trainer(
        tmp_path, env_id="test/expert-v0", start="expert", group_size=2, tasks_per_step=3, refill_tasks=0
    )
    trainer.setup_data()
    row = trainer.train_step(0)
    drawn = DataOrder(len(trainer.task_ids), trainer.config.seed).take(3)  # the step's tasks, in draw order
    starts = [len(trainer.start_prefix(trainer.task_ids[i], 0, draw)) for draw, i in enumerate(drawn)]
    assert row["start_turn"] == pytest.approx(sum(starts) / 3)
    assert row["turns"] == 2 * sum(3 - t for t in starts)  # the env ends at its 3rd turn, replayed ones included
    assert trainer.counters.rollout_turns + trainer.counters.filtered_turns == row["turns"]


def test_expert_starts_without_expert_actions_or_an_unknown_start_are_config_errors(tmp_path, toy_envs):
    trainer = _trainer(tmp_path, start="expert")
    with pytest.raises(ConfigError, match="no expert actions for task 'train-0'"):
        trainer.start_prefix("train-0", 0, 0)
    with pytest.raises(ConfigError, match="start: must be one of reset, expert"):
        E2EConfig(env_id="x", start="middle").validate()


def test_evaluation_episodes_come_from_a_named_split_or_none_and_a_wrong_split_is_an_error(tmp_path, toy_envs):
    trainer = _trainer(tmp_path / "test")
    trainer.setup_data()
    assert len(trainer.eval_task_ids) == 1 and trainer.evaluate()["episodes"] == 1
    off = _trainer(tmp_path / "off", eval_split=None)
    off.setup_data()
    assert off.eval_task_ids == [] and off.evaluate() == {}  # fit() then logs no eval rows
    typo = _trainer(tmp_path / "typo", eval_split="tset")
    with pytest.raises(ConfigError, match=r"no split 'tset'.*set eval_split to one of them, or to null"):
        typo.setup_data()


def test_episodes_are_the_same_with_and_without_prefix_reuse_and_later_turns_reuse_the_history(toy_envs):
    from pivotgym.registry import make
    from pivotgym.rollout import run_episodes
    from pivotgym.sampling.base import SamplingParams
    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=3)
    sampler = HFSampler(model, tokenizer, cache_implementation="dynamic")
    runs = {}
    for reuse in (False, True):
        runs[reuse] = run_episodes(
            sampler,
            lambda: make("test/parity-v0"),
            ["train-0", "train-1"],
            SamplingParams(temperature=1.0, max_new_tokens=4),
            n=3,
            seeds=lambda g, turn, slot: 100 * g + 10 * turn + slot,
            tokens=True,
            reuse_prefixes=reuse,
        )
        if not reuse:
            assert sampler.prefix_stats["reused_tokens"] == 0
    assert [[e.turns for e in g] for g in runs[False]] == [[e.turns for e in g] for g in runs[True]]
    # turns 2 and 3 of every episode reuse at least its first prompt
    first = sum(len(g[0].turns[0][0]) for g in runs[True]) * 3
    assert sampler.prefix_stats["reused_tokens"] >= 2 * first
