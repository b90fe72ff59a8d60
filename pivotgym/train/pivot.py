"""PivotRL: GRPO on pivot states.

Each step draws ``pivots_per_step`` states (a seeded shuffle, resumable), samples ``group_size``
completions per state from the current policy (all states in one batched call, one shared prefill per
state; each completion at most as long as its env's own generation limit, which ``max_new_tokens`` can only
shorten, as in profiling and evaluation), scores them with the functional verifier from the exact state,
drops zero-variance groups (counted as filtered turns) and applies the clipped-surrogate update of
:class:`~pivotgym.train.rl.RLTrainer` through :meth:`~pivotgym.train.rl.RLTrainer.apply_update` (skipped
below ``min_informative_groups``, its rate scaled by the informative share). With ``refill: true`` a step
short of informative groups draws ``pivots_per_step`` more states from the seeded order, at most
``refill_rounds`` times (the next states of the order, i.e. not yet used this epoch; their rollouts count
like the first round's).
Evaluation scores a fixed set of pivot states with fixed seeds, so scores at different steps are comparable,
and the greedy pass rate on profiled turns that were *not* selected as pivots (``non_pivot_eval``): what
training on the pivots does to the training turns it does not train on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pivotgym.sampling.base import Sampler, SamplingParams, sample_seeded
from pivotgym.train.config import PivotConfig
from pivotgym.train.loop import DataOrder, Trainer, sample_seed, shard
from pivotgym.train.rl import PolicySample, RLTrainer, group_samples
from pivotgym.train.states import PivotState, StateScorer, load_pivot_states, states_from_profiles
from pivotgym.types import Completion

EVAL_SALT = 7_919
NON_PIVOT_SALT = 6_151


def state_tokens(state: PivotState, cap: int | None) -> int:
    """New tokens per completion at ``state``: its own limit (its env's), which ``cap`` can only shorten."""
    return min(state.max_new_tokens, int(cap)) if cap else state.max_new_tokens


def sample_states(
    sampler: Sampler,
    states: Sequence[PivotState],
    n: int,
    params: SamplingParams,
    seeds: Sequence[int],
    cap: int | None = None,
) -> list[list[Completion]]:
    """``n`` completions per state, state ``i`` under ``seeds[i]`` and capped by :func:`state_tokens`; states
    with the same cap share one batched call (the states of one env always do)."""
    out: list[list[Completion]] = [[] for _ in states]
    by_tokens: dict[int, list[int]] = {}
    for i, state in enumerate(states):
        by_tokens.setdefault(state_tokens(state, cap), []).append(i)
    for tokens, picked in sorted(by_tokens.items()):
        groups = sample_seeded(
            sampler,
            [states[i].prompt_ids for i in picked],
            n,
            replace(params, max_new_tokens=tokens),
            [seeds[i] for i in picked],
        )
        for i, group in zip(picked, groups):
            out[i] = group
    return out


def evaluate_states(
    trainer: Trainer,
    states: Sequence[PivotState],
    scorer: StateScorer,
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int | None,
    seed: int,
) -> dict[str, Any]:
    """Mean verifier reward of ``samples`` completions per state from the current policy (greedy when
    ``temperature`` is 0), each at most its state's generation limit (``max_new_tokens`` only shortens it).
    Seeds depend only on ``seed`` and the state, so every call uses the same ones. States are split across
    processes and the result is global."""
    greedy = temperature <= 0
    n = 1 if greedy else samples
    total = solved = turns = 0.0
    mine = shard(list(enumerate(states)), trainer.rank, trainer.world)
    params = SamplingParams(temperature=1.0 if greedy else temperature, top_k=1 if greedy else 0)
    groups = sample_states(
        trainer.sampler,
        [state for _, state in mine],
        n,
        params,
        [sample_seed(seed, 0, i, EVAL_SALT) for i, _ in mine],
        max_new_tokens,
    )
    for (_, state), completions in zip(mine, groups):
        rewards = scorer.score(state, [c.text for c in completions])
        total += sum(rewards)
        solved += float(max(rewards) >= 1.0)
        turns += len(completions)
    total, solved, turns = (trainer.reduce_sum(v) for v in (total, solved, turns))
    trainer.counters.eval_turns += int(turns)
    return {
        "score": total / max(1.0, turns),
        "pass_any": solved / max(1, len(states)),
        "states": len(states),
        "samples": int(turns),
    }


class PivotTrainer(RLTrainer):
    """GRPO on the states of a pivot set (see the module docstring).

    ``states`` replaces the pivot set's states (already encoded); ``non_pivot_states`` are the training
    states that were profiled but not selected, scored greedily at every evaluation (the first
    ``non_pivot_eval`` of them; without them the trainer draws ``non_pivot_eval`` from ``profiles``)."""

    name = "pivot"
    config_class = PivotConfig
    config: PivotConfig

    def __init__(
        self,
        config: PivotConfig,
        *,
        states: Sequence[PivotState] | None = None,
        non_pivot_states: Sequence[PivotState] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        self.states: list[PivotState] = list(states) if states is not None else []
        self.non_pivot_states: list[PivotState] = list(non_pivot_states or [])[: config.non_pivot_eval]
        self._draw_non_pivots = non_pivot_states is None
        self.scorer = StateScorer()

    def setup_data(self) -> None:
        cfg = self.config
        if not self.states:
            if not cfg.pivots:
                from pivotgym.train.config import ConfigError

                raise ConfigError("the pivot trainer needs `pivots` (a pivot-set JSONL from `pivotgym select`)")
            self.states = load_pivot_states(
                cfg.pivots,
                self.sampler.encode,
                cfg.verifier,
                cap=cfg.max_new_tokens,
                trajectories=cfg.trajectories or None,
            )
        if self._draw_non_pivots and cfg.non_pivot_eval and cfg.profiles:
            self.non_pivot_states = self._load_non_pivots()
        self.order = DataOrder(len(self.states), cfg.seed)
        self.data_state = {"cursor": 0}
        self.counters.profiling_turns = self._profiling_turns()

    def _load_non_pivots(self) -> list[PivotState]:
        """``non_pivot_eval`` states of ``profiles`` that are not pivots (not among :attr:`states`), drawn by
        the run seed from the profiles' order: every method run with this seed scores the same ones."""
        from pivotgym.jsonl import read_profiles

        cfg = self.config
        assert cfg.profiles is not None
        pivots = {(s.turn.trajectory_id, s.turn.turn) for s in self.states}
        rest = [p for p in read_profiles(cfg.profiles) if (p.trajectory_id, p.turn) not in pivots]
        rest = list({(p.trajectory_id, p.turn): p for p in rest}.values())  # one state per turn
        chosen = random.Random(cfg.seed * 1_000_003 + NON_PIVOT_SALT).sample(rest, min(cfg.non_pivot_eval, len(rest)))
        if not chosen:
            return []
        return states_from_profiles(
            chosen,
            self.sampler.encode,
            cfg.verifier,
            source=cfg.profiles,
            cap=cfg.max_new_tokens,
            trajectories=cfg.trajectories or None,
        )

    def _profiling_turns(self) -> int:
        """Turns the profiler generated: every profiled state's K when the profiles file is given, else a
        lower bound from the pivots themselves."""
        from pivotgym.jsonl import iter_jsonl

        if self.config.profiles:
            return sum(int(row.get("k", 0)) for row in iter_jsonl(self.config.profiles))
        return sum(int(s.profile.k) for s in self.states if s.profile is not None)

    @property
    def eval_states(self) -> list[PivotState]:
        n = self.config.eval_pivots
        return self.states[:n] if n else self.states

    def _sample_round(
        self, step: int, picked: Sequence[tuple[int, int]], samples: list[PolicySample], local: dict[str, float]
    ) -> None:
        """Sample and score the groups of ``picked`` (``(global index, state index)`` pairs) on this process,
        appending the informative groups' samples to ``samples`` and counting into ``local``."""
        cfg = self.config
        mine = shard(list(picked), self.rank, self.world)
        states = [self.states[state_index] for _, state_index in mine]
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p)
        with self.counters.time("generation"):  # every state of the round in one batched call, own seed each
            groups = sample_states(
                self.sampler,
                states,
                cfg.group_size,
                params,
                [sample_seed(cfg.seed, step, global_index) for global_index, _ in mine],
                cfg.max_new_tokens,
            )
        for (global_index, state_index), state, completions in zip(mine, states, groups):
            with self.counters.time("verification"):
                judged = self.scorer.score_judged(state, [c.text for c in completions], self.counters.verifier_cost)
            # a failed verification is no reward: its sample leaves the group (no fake advantage from a 0)
            keep = [i for i, r in enumerate(judged) if r is not None]
            local["failed_verifications"] += len(judged) - len(keep)
            rewards = [float(r) for r in judged if r is not None]
            group = (
                group_samples(
                    state.prompt_ids,
                    [completions[i].token_ids for i in keep],
                    rewards,
                    cfg.advantage,
                    {"state": state_index},
                    [completions[i].logprobs for i in keep],
                    placebo=self.placebo_rng(step, global_index),
                )
                if len(keep) >= 2
                else []
            )
            local["tokens_generated"] += sum(len(c.token_ids) for c in completions)
            local["reward_sum"] += sum(rewards)
            local["judged"] += len(rewards)
            local["groups"] += 1
            if group:
                samples.extend(group)
                local["rollout_turns"] += len(completions)
                local["informative"] += 1
            else:
                local["filtered_turns"] += len(completions)

    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        self.order.cursor = int(self.data_state.get("cursor", 0))
        samples: list[PolicySample] = []
        local: dict[str, float] = {
            "rollout_turns": 0,
            "filtered_turns": 0,
            "tokens_generated": 0,
            "reward_sum": 0.0,
            "groups": 0,
            "informative": 0,
            "failed_verifications": 0,
            "judged": 0,
        }
        drawn = rounds = 0
        informative = 0.0
        while True:  # a plain step is one round; refill rounds draw the next states of the seeded order
            picked = [(drawn + i, state_index) for i, state_index in enumerate(self.order.take(cfg.pivots_per_step))]
            drawn += len(picked)
            before = local["informative"]
            self._sample_round(step, picked, samples, local)
            informative += self.reduce_sum(local["informative"] - before)
            if not (cfg.refill and informative < cfg.min_informative_groups and rounds < cfg.refill_rounds):
                break
            rounds += 1
        self.data_state = {"cursor": self.order.cursor}
        totals = {k: self.reduce_sum(v) for k, v in local.items()}
        with self.counters.time("fwd_bwd"):
            stats = self.apply_update(
                samples, informative=totals["informative"], groups=totals["groups"], planned=cfg.pivots_per_step
            )
        self.counters.rollout_turns += int(totals["rollout_turns"])
        self.counters.filtered_turns += int(totals["filtered_turns"])
        self.counters.tokens_generated += int(totals["tokens_generated"])
        self.counters.add_applied(refill_groups=drawn - cfg.pivots_per_step)
        return {
            **stats,
            "reward_mean": totals["reward_sum"] / max(1.0, totals["judged"]),
            "informative_groups": totals["informative"] / max(1.0, totals["groups"]),
            "refilled_pivots": drawn - cfg.pivots_per_step,  # this step (the counter is cumulative)
            "failed_verifications": int(totals["failed_verifications"]),
        }

    def evaluate(self) -> dict[str, Any]:
        """The eval pivots' score (see :func:`evaluate_states`); with non-pivot states also
        ``non_pivot_pass``, their greedy mean reward (``non_pivot_states`` of them)."""
        cfg = self.config
        result = evaluate_states(
            self,
            self.eval_states,
            self.scorer,
            samples=cfg.eval_samples,
            temperature=cfg.eval_temperature,
            max_new_tokens=cfg.max_new_tokens,
            seed=cfg.seed,
        )
        if self.non_pivot_states:
            held = evaluate_states(
                self,
                self.non_pivot_states,
                self.scorer,
                samples=1,
                temperature=0.0,
                max_new_tokens=cfg.max_new_tokens,
                seed=cfg.seed,
            )
            result["non_pivot_pass"] = held["score"]
            result["non_pivot_states"] = held["states"]
        return result


__all__ = ["PivotTrainer", "evaluate_states", "sample_states", "state_tokens"]
