"""End-to-end multi-turn RL: whole episodes with the current policy and the outcome reward (the paper's
compute baseline).

Each step draws ``tasks_per_step`` tasks and runs ``group_size`` episodes of each through the env, the
episodes of every task advancing together (one batched sampler call per turn). Every assistant turn becomes
a training sample - its prompt ids exactly as sampled from, its completion ids exactly as generated -
whose advantage is its episode's group-relative outcome advantage. Groups whose episodes all got the same
return are dropped (their turns counted as filtered). The loss is the same clipped surrogate as the pivot
trainer's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pivotgym.eval.rollout import Episode
from pivotgym.eval.rollout import run_episodes as rollout_episodes
from pivotgym.sampling.base import SamplingParams
from pivotgym.train.config import ConfigError, E2EConfig
from pivotgym.train.loop import DataOrder, Trainer, sample_seed, shard
from pivotgym.train.rl import PolicySample, RLTrainer, group_samples

EVAL_SALT = 104_729
TURN_SALT = 7_907


def run_episodes(
    trainer: Trainer,
    env_id: str,
    tasks: Sequence[tuple[str, int]],
    n: int,
    params: SamplingParams,
    max_turns: int | None = None,
    timed: bool = True,
) -> list[list[Episode]]:
    """``n`` episodes of each ``(task_id, seed)`` with the trainer's current policy, all advancing together, by
    the one episode loop (:func:`pivotgym.eval.rollout.run_episodes`).

    Each turn is one batched sampler call over every live episode of every task; while a task's episodes
    still share one prompt (the first turn) that prompt is prefilled once and sampled ``n`` times. Seeds
    derive from the task's seed, the turn and the episode index alone, so an episode does not depend on which
    other tasks ran beside it. An episode's return (:attr:`Episode.reward`) is the sum of its step rewards,
    as in evaluation. When ``timed``, time is split into the generation and verification (env) counters
    (evaluations pass ``timed=False``)."""
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
    )


class E2ETrainer(RLTrainer):
    """End-to-end multi-turn RL with outcome rewards (see the module docstring)."""

    name = "e2e"
    config_class = E2EConfig
    config: E2EConfig

    def __init__(self, config: E2EConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.task_ids: list[str] = []
        self.eval_task_ids: list[str] = []

    def setup_data(self) -> None:
        from pivotgym.registry import make

        cfg = self.config
        if not cfg.env_id:
            raise ConfigError("the e2e trainer needs `env_id` (see `pivotgym envs`)")
        env = make(cfg.env_id)
        self.task_ids = [t.id for t in env.tasks(cfg.split)]
        if not self.task_ids:
            raise ConfigError(f"{cfg.env_id}: split {cfg.split!r} has no tasks")
        eval_tasks = env.tasks(cfg.eval_split) if cfg.eval_split in env.splits else []
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

    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        self.order.cursor = int(self.data_state.get("cursor", 0))
        picked = list(enumerate(self.order.take(cfg.tasks_per_step)))
        self.data_state = {"cursor": self.order.cursor}
        samples: list[PolicySample] = []
        local = {
            "rollout_turns": 0,
            "filtered_turns": 0,
            "tokens_generated": 0,
            "reward_sum": 0.0,
            "episodes": 0,
            "groups": 0,
            "informative": 0,
        }
        mine = shard(picked, self.rank, self.world)
        tasks = [
            (self.task_ids[task_index], sample_seed(cfg.seed, step, global_index)) for global_index, task_index in mine
        ]
        for episodes in run_episodes(self, cfg.env_id, tasks, cfg.group_size, self._params(), cfg.max_turns):
            rewards = [e.reward for e in episodes]
            n_turns = sum(len(e.turns) for e in episodes)
            local["tokens_generated"] += sum(len(c) for e in episodes for _, c in e.turns)
            local["reward_sum"] += sum(rewards)
            local["episodes"] += len(episodes)
            local["groups"] += 1
            # group-relative advantages over episodes; every turn of an episode shares its advantage
            per_episode = group_samples([0], [[0]] * len(episodes), rewards, cfg.advantage)
            if not per_episode:
                local["filtered_turns"] += n_turns
                continue
            local["rollout_turns"] += n_turns
            local["informative"] += 1
            for episode, marker in zip(episodes, per_episode):
                for prompt, completion in episode.turns:
                    samples.append(
                        PolicySample(prompt, completion, marker.advantage, episode.reward, {"task": episode.task_id})
                    )
        totals = {k: self.reduce_sum(v) for k, v in local.items()}
        with self.counters.time("fwd_bwd"):
            stats = self.policy_update(samples)
        self.counters.rollout_turns += int(totals["rollout_turns"])
        self.counters.filtered_turns += int(totals["filtered_turns"])
        self.counters.tokens_generated += int(totals["tokens_generated"])
        return {
            **stats,
            "reward_mean": totals["reward_sum"] / max(1.0, totals["episodes"]),
            "informative_groups": totals["informative"] / max(1.0, totals["groups"]),
        }

    def evaluate(self) -> dict[str, Any]:
        cfg = self.config
        if not self.eval_task_ids:
            return {}
        greedy = cfg.eval_temperature <= 0
        n = 1 if greedy else cfg.eval_samples
        total = episodes_n = turns = 0.0
        mine = shard(list(enumerate(self.eval_task_ids)), self.rank, self.world)
        tasks = [(task_id, sample_seed(cfg.seed, 0, i, EVAL_SALT)) for i, task_id in mine]
        for episodes in run_episodes(
            self, cfg.env_id, tasks, n, self._params(cfg.eval_temperature), cfg.max_turns, timed=False
        ):
            total += sum(e.score for e in episodes)
            episodes_n += len(episodes)
            turns += sum(len(e.turns) for e in episodes)
        total, episodes_n, turns = (self.reduce_sum(v) for v in (total, episodes_n, turns))
        self.counters.eval_turns += int(turns)
        return {"score": total / max(1.0, episodes_n), "episodes": int(episodes_n), "tasks": len(self.eval_task_ids)}


__all__ = ["E2ETrainer", "Episode", "run_episodes"]
