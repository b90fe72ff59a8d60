"""End-to-end multi-turn RL: whole episodes with the current policy and the outcome reward (the paper's
compute baseline).

Each step draws ``tasks_per_step`` tasks and runs ``group_size`` episodes of each through the env, the
episodes of every task advancing together (one batched sampler call per turn). An episode's advantage is its
group-relative return; groups whose episodes all got the same return carry no signal and are dropped (their
turns counted as filtered). Up to ``refill_tasks`` further tasks per step - the next ones of the seeded task
order, so a run repeats - are drawn in rounds until the step has ``tasks_per_step`` informative groups; every
rollout turn of a refill counts.

**One training sequence per episode** (``pack_episodes``). Each turn's prompt is the env's history rendered by
the chat template, so it normally *extends* the previous turn's prompt and completion: the episode is then
one sequence ``prompt_1 + completion_1 + observation_1 + completion_2 + ...`` with the token ids exactly as
sampled, the observations' tokens masked out of the loss. Every completion token is then conditioned on
exactly the ids it was sampled from, so the packed loss and gradient equal those of one sample per turn
(a test checks it) at a fraction of the token positions. Where the history is *not* prefix-consistent - the
template re-tokenises a completion differently from how it was sampled (a non-canonical tokenisation: the
135M model at temperature 1 does this in ~13% of blocks turns), or re-renders earlier turns - the episode is
cut there and packing restarts from that turn's own prompt: a counted fallback (``packing_breaks``), never a
sequence whose context differs from what was sampled. ``pack_episodes: false`` trains one sample per turn.

**Start**: ``reset`` starts every episode from its task's initial state (the paper's E2E RL). ``expert``
starts each group from a state of its task's expert trajectory: the turn is drawn uniformly per group from
the run seed, the step and the draw, and the expert's actions up to it are replayed through the env (not
sampled, trained or counted as rollout turns). Those are the states PivotRL profiles; from them a start model
that rarely solves a whole task finishes some, so groups carry a signal while the reward stays the outcome.

**Reward**: ``outcome`` (the main comparison) is the episode's return; ``progress`` is the env's
:meth:`~pivotgym.env.AgentEnv.progress` at the episode's end (1.0 for a solved episode), a partial-progress
row that an env without the hook refuses with an error naming it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pivotgym.rollout import Episode
from pivotgym.rollout import run_episodes as rollout_episodes
from pivotgym.sampling.base import SamplingParams
from pivotgym.train.config import ConfigError, E2EConfig
from pivotgym.train.loop import DataOrder, Trainer, sample_seed, shard
from pivotgym.train.rl import MicroBatch, PolicySample, RLTrainer, group_samples

EVAL_SALT = 104_729
TURN_SALT = 7_907
START_SALT = 3_571
#: what a step sums over its groups (then over processes)
STEP_SUMS = (
    "turns",
    "rollout_turns",
    "filtered_turns",
    "tokens_generated",
    "reward_sum",
    "solved_sum",
    "episodes",
    "groups",
    "informative",
    "samples",
    "packing_breaks",
    "start_turns",
)
#: key of a packed sample's loss mask in :attr:`PolicySample.meta` (1: a completion token, 0: the env's)
LOSS_MASK = "loss_mask"


def run_episodes(
    trainer: Trainer,
    env_id: str,
    tasks: Sequence[tuple[str, int]],
    n: int,
    params: SamplingParams,
    max_turns: int | None = None,
    timed: bool = True,
    read_progress: bool = False,
    starts: Sequence[Sequence[str]] | None = None,
) -> list[list[Episode]]:
    """``n`` episodes of each ``(task_id, seed)`` with the trainer's current policy, all advancing together, by
    the one episode loop (:func:`pivotgym.rollout.run_episodes`).

    Each turn is one batched sampler call over every live episode of every task; while a task's episodes
    still share one prompt (the first turn) that prompt is prefilled once and sampled ``n`` times. Seeds
    derive from the task's seed, the turn and the episode index alone, so an episode does not depend on which
    other tasks ran beside it. An episode's return (:attr:`Episode.reward`) is the sum of its step rewards,
    as in evaluation. When ``timed``, time is split into the generation and verification (env) counters
    (evaluations pass ``timed=False``); ``read_progress`` records the env's progress at each episode's end;
    ``starts``: per task, the actions replayed before the first sampled turn."""
    from pivotgym.registry import make

    return rollout_episodes(
        trainer.sampler,
        lambda: make(env_id),
        [task_id for task_id, _ in tasks],
        params,
        n=n,
        seeds=lambda g, turn, slot: sample_seed(tasks[g][1], turn, slot, TURN_SALT),
        max_turns=max_turns,
        tokens=True,
        timer=trainer.counters.time if timed else None,
        read_progress=read_progress,
        starts=starts,
    )


@dataclass
class PackedSequence:
    """Consecutive turns of one episode as one training sequence: ``prompt_ids`` (the first turn's prompt)
    followed by ``completion_ids`` (completions and the observation tokens between them), ``loss_mask`` over
    ``completion_ids`` (1 on sampled tokens, 0 on the env's), and how many turns it holds."""

    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    turns: int


def pack_episode(turns: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[PackedSequence]:
    """An episode's ``(prompt ids, completion ids)`` turns as packed sequences: one when every turn's prompt
    starts with the previous turn's prompt + completion (prefix-consistent history), else one per
    consistent run - a turn whose prompt does not extend the sequence so far starts a new sequence from its
    own prompt. ``len(result) - 1`` is the number of breaks. Every completion token keeps exactly the
    context it was sampled from."""
    out: list[PackedSequence] = []
    seq: list[int] = []
    for prompt, completion in turns:
        prompt, completion = list(prompt), list(completion)
        if out and prompt[: len(seq)] == seq and len(prompt) >= len(seq):
            current = out[-1]
            observation = prompt[len(seq) :]
            current.completion_ids += observation + completion
            current.loss_mask += [0] * len(observation) + [1] * len(completion)
            current.turns += 1
        else:
            out.append(PackedSequence(prompt, list(completion), [1] * len(completion), 1))
        seq = prompt + completion
    return out


class E2ETrainer(RLTrainer):
    """End-to-end multi-turn RL with outcome rewards (see the module docstring)."""

    name = "e2e"
    config_class = E2EConfig
    config: E2EConfig

    def __init__(self, config: E2EConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.task_ids: list[str] = []
        self.eval_task_ids: list[str] = []
        self._plans: dict[str, list[str]] = {}

    def setup_data(self) -> None:
        from pivotgym.registry import make

        cfg = self.config
        if not cfg.env_id:
            raise ConfigError("the e2e trainer needs `env_id` (see `pivotgym envs`)")
        env = make(cfg.env_id)
        self.task_ids = [t.id for t in env.tasks(cfg.split)]
        if not self.task_ids:
            raise ConfigError(f"{cfg.env_id}: split {cfg.split!r} has no tasks")
        if cfg.eval_split is not None and cfg.eval_split not in env.splits:
            raise ConfigError(
                f"{cfg.env_id} has no split {cfg.eval_split!r} for E2E RL's evaluation episodes (its splits: "
                f"{', '.join(env.splits)}); set eval_split to one of them, or to null for no evaluation episodes"
            )
        eval_tasks = env.tasks(cfg.eval_split) if cfg.eval_split is not None else []
        self.eval_task_ids = [t.id for t in eval_tasks][: cfg.eval_tasks or None]
        self.order = DataOrder(len(self.task_ids), cfg.seed)
        self.data_state = {"cursor": 0}

    def _params(self, temperature: float | None = None) -> SamplingParams:
        from pivotgym.env import generation_cap
        from pivotgym.registry import make

        cfg = self.config
        t = cfg.temperature if temperature is None else temperature
        greedy = t <= 0
        return SamplingParams(
            temperature=1.0 if greedy else t,
            top_p=cfg.top_p,
            top_k=1 if greedy else 0,
            max_new_tokens=generation_cap(make(cfg.env_id), cfg.max_new_tokens),
        )

    def start_prefix(self, task_id: str, step: int, draw: int) -> list[str]:
        """The expert actions replayed before group ``draw`` of ``step`` samples (``start: expert``): the
        first t of the task's expert plan, t uniform over its turns; empty with ``start: reset``."""
        if self.config.start == "reset":
            return []
        if task_id not in self._plans:
            from pivotgym.registry import make

            env = make(self.config.env_id)
            try:
                actions = env.expert_actions(env.get_task(task_id))
            except NotImplementedError:
                actions = None
            if not actions:
                raise ConfigError(
                    f"start: expert, but {self.config.env_id} has no expert actions for task {task_id!r}",
                    hint="use start: reset, or train on tasks with expert solutions",
                )
            self._plans[task_id] = [env.render_action(m) for m in actions]
        plan = self._plans[task_id]
        turn = random.Random(sample_seed(self.config.seed, step, draw, START_SALT)).randrange(len(plan))
        return plan[:turn]

    # ------------------------------------------------------------------ rewards and samples
    def episode_return(self, episode: Episode) -> float:
        """The training return of ``episode``: its return (``reward: outcome``) or the env's progress at its
        end, 1.0 when solved (``reward: progress``)."""
        if self.config.reward == "outcome":
            return episode.reward
        if episode.progress is None:
            raise ConfigError(
                f"reward: progress, but {self.config.env_id} reports no progress (AgentEnv.progress() returned None)",
                hint=f"use reward: outcome for {self.config.env_id}, or implement progress() in the env",
            )
        return max(episode.score, min(1.0, max(0.0, episode.progress)))

    def episode_samples(self, episode: Episode, advantage: float, reward: float) -> tuple[list[PolicySample], int]:
        """The training samples of one episode and the number of packing breaks: one packed sequence per
        prefix-consistent run of turns (``pack_episodes``), else one sample per turn."""
        meta = {"task": episode.task_id}
        if not self.config.pack_episodes:
            return [PolicySample(p, c, advantage, reward, dict(meta)) for p, c in episode.turns], 0
        packed = pack_episode(episode.turns)
        samples = [
            PolicySample(s.prompt_ids, s.completion_ids, advantage, reward, {**meta, LOSS_MASK: s.loss_mask})
            for s in packed
        ]
        return samples, max(0, len(packed) - 1)

    def _rollout_round(
        self, step: int, picked: Sequence[tuple[int, int]], samples: list[PolicySample], local: dict[str, float]
    ) -> None:
        """Run the groups of ``picked`` (``(draw index, task index)`` pairs; this process's share) and append
        the informative groups' samples to ``samples``, counting into ``local``."""
        cfg = self.config
        mine = shard(list(picked), self.rank, self.world)
        tasks = [(self.task_ids[task_index], sample_seed(cfg.seed, step, draw)) for draw, task_index in mine]
        starts = [self.start_prefix(self.task_ids[task_index], step, draw) for draw, task_index in mine]
        groups = run_episodes(
            self,
            cfg.env_id,
            tasks,
            cfg.group_size,
            self._params(),
            cfg.max_turns,
            read_progress=cfg.reward == "progress",
            starts=starts,
        )
        for (draw, _), episodes in zip(mine, groups):
            rewards = [self.episode_return(e) for e in episodes]
            n_turns = sum(len(e.turns) for e in episodes)
            local["turns"] += n_turns
            local["tokens_generated"] += sum(len(c) for e in episodes for _, c in e.turns)
            local["reward_sum"] += sum(rewards)
            local["solved_sum"] += sum(e.score for e in episodes)
            local["episodes"] += len(episodes)
            local["groups"] += 1
            local["start_turns"] += episodes[0].start if episodes else 0
            # group-relative advantages over episodes; every completion token of an episode shares its advantage
            markers = group_samples(
                [0], [[0]] * len(episodes), rewards, cfg.advantage, placebo=self.placebo_rng(step, draw)
            )
            if not markers:
                local["filtered_turns"] += n_turns
                continue
            local["rollout_turns"] += n_turns
            local["informative"] += 1
            for episode, marker, reward in zip(episodes, markers, rewards):
                made, breaks = self.episode_samples(episode, marker.advantage, reward)
                samples += made
                local["samples"] += len(made)
                local["packing_breaks"] += breaks

    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        self.order.cursor = int(self.data_state.get("cursor", 0))
        samples: list[PolicySample] = []
        local: dict[str, float] = dict.fromkeys(STEP_SUMS, 0.0)
        drawn = 0
        informative = 0.0
        budget = cfg.tasks_per_step + cfg.refill_tasks
        while True:  # the first round draws tasks_per_step tasks; refills replace the uninformative groups
            want = cfg.tasks_per_step if drawn == 0 else min(cfg.tasks_per_step - int(informative), budget - drawn)
            if want <= 0:
                break
            picked = [(drawn + i, task_index) for i, task_index in enumerate(self.order.take(want))]
            drawn += want
            before = local["informative"]
            self._rollout_round(step, picked, samples, local)
            informative += self.reduce_sum(local["informative"] - before)
        self.data_state = {"cursor": self.order.cursor}
        totals = {k: self.reduce_sum(v) for k, v in local.items()}
        with self.counters.time("fwd_bwd"):
            stats = self.apply_update(
                samples, informative=totals["informative"], groups=totals["groups"], planned=cfg.tasks_per_step
            )
        self.counters.rollout_turns += int(totals["rollout_turns"])
        self.counters.filtered_turns += int(totals["filtered_turns"])
        self.counters.tokens_generated += int(totals["tokens_generated"])
        self.counters.add_applied(refill_groups=drawn - cfg.tasks_per_step)
        episodes = max(1.0, totals["episodes"])
        return {
            **stats,
            "reward_mean": totals["reward_sum"] / episodes,
            "solved_rate": totals["solved_sum"] / episodes,
            "informative_groups": totals["informative"] / max(1.0, totals["groups"]),
            "start_turn": totals["start_turns"] / max(1.0, totals["groups"]),  # expert turns replayed, mean per group
            "refill_tasks": drawn - cfg.tasks_per_step,  # this step (the counter refill_groups is cumulative)
            "episodes": int(totals["episodes"]),
            "turns": int(totals["turns"]),
            "samples": int(totals["samples"]),
            "packing_breaks": int(totals["packing_breaks"]),
        }

    # ------------------------------------------------------------------ the packed sequences' loss mask
    def _logprobs(self, model: Any, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The completion logprobs and mask of :class:`RLTrainer`, with each packed sample's observation
        tokens masked out (they are the env's, not the policy's)."""
        logp, mask = super()._logprobs(model, mb)
        if not any(LOSS_MASK in s.meta for s in mb.samples):
            return logp, mask
        keep = mask.clone()
        for row, sample in enumerate(mb.samples):
            loss_mask = sample.meta.get(LOSS_MASK)
            if loss_mask is not None:
                keep[row, : len(loss_mask)] *= torch.as_tensor(loss_mask, dtype=keep.dtype, device=keep.device)
        return logp * keep.to(logp.dtype), keep

    def prepare_batches(self, samples: Sequence[PolicySample]) -> tuple[list[MicroBatch], float]:
        """:meth:`RLTrainer.prepare_batches`, with the loss normalised over the *sampled* tokens of the global
        batch (packed samples' observation tokens are not counted), as one sample per turn would be."""
        batches, _ = super().prepare_batches(samples)
        tokens = sum(_loss_tokens(s) for mb in batches for s in mb.samples)
        return batches, self.reduce_sum(tokens)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, Any]:
        """Mean score of ``eval_samples`` episodes (1 when greedy) per eval task, each capped only by the env's
        own turn limit (not the training ``max_turns``), as every method's evaluation is."""
        cfg = self.config
        if not self.eval_task_ids:
            return {}
        greedy = cfg.eval_temperature <= 0
        n = 1 if greedy else cfg.eval_samples
        total = episodes_n = turns = 0.0
        mine = shard(list(enumerate(self.eval_task_ids)), self.rank, self.world)
        tasks = [(task_id, sample_seed(cfg.seed, 0, i, EVAL_SALT)) for i, task_id in mine]
        for episodes in run_episodes(self, cfg.env_id, tasks, n, self._params(cfg.eval_temperature), timed=False):
            total += sum(e.score for e in episodes)
            episodes_n += len(episodes)
            turns += sum(len(e.turns) for e in episodes)
        total, episodes_n, turns = (self.reduce_sum(v) for v in (total, episodes_n, turns))
        self.counters.eval_turns += int(turns)
        return {"score": total / max(1.0, episodes_n), "episodes": int(episodes_n), "tasks": len(self.eval_task_ids)}


def _loss_tokens(sample: PolicySample) -> int:
    mask = sample.meta.get(LOSS_MASK)
    return len(sample.completion_ids) if mask is None else int(sum(mask))


__all__ = ["E2ETrainer", "Episode", "PackedSequence", "pack_episode", "run_episodes"]
