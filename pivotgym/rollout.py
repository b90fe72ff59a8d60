"""The one episode loop: evaluation, the experiment's curve points and end-to-end RL all run episodes here.

An episode's **return** is the sum of its step rewards (:attr:`Episode.reward`); that is what E2E training
turns into advantages. Its **score** (:attr:`Episode.score`) is the return capped at 1: the success measure of
evaluation, learning curves and E2E's own evaluation. The first-party envs reward only the final step (1 for
a solved task, else 0), so there the return, the score and the final reward coincide; an env that pays
intermediate rewards is measured by their sum, in training and evaluation alike.

Episodes advance in lockstep: each turn is one batched sampler call over every live episode (``batch_size``
tasks at a time). With ``n > 1`` episodes per task, a task whose episodes still share one prompt (the first
turn) sends that prompt once, sampled ``n`` times. With ``seeds``, every prompt is sampled under its own seed
(:func:`pivotgym.sampling.base.sample_seeded`), so an episode does not depend on which others ran beside it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pivotgym.sampling.base import SamplingParams, sample_seeded

#: seed of one sampling slot: (task index, turn, slot), where slot 0 is a task's shared prompt sampled ``n``
#: times and slot ``j + 1`` is episode ``j`` sampled alone
SeedFn = Callable[[int, int, int], int]


@dataclass
class Episode:
    """One episode of one task.

    ``rewards`` holds each assistant turn's step reward; ``turns`` its (prompt ids, completion ids) when the
    loop records tokens (training), else stays empty; ``steps`` and ``messages`` are the transcript (per-turn
    records and the env's chat history) when asked for. ``progress`` is the env's
    :meth:`~pivotgym.env.AgentEnv.progress` read once the episode is over (done or cut off), when asked for
    (None: not asked, or the env cannot say). ``start`` is the number of actions replayed before the first sampled
    turn (0: the episode starts from the task's reset state)."""

    task_id: str
    rewards: list[float] = field(default_factory=list)
    turns: list[tuple[list[int], list[int]]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    done: bool = False
    tokens: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    progress: float | None = None
    start: int = 0
    #: why the env could not score the episode (its final ``info["undecided"]``: a τ² task whose reward needs
    #: natural-language assertions judged), else None; evaluation leaves such an episode out and counts it
    undecided: str | None = None

    @property
    def reward(self) -> float:
        """The return: the sum of the step rewards."""
        return float(sum(self.rewards))

    @property
    def score(self) -> float:
        """The return capped at 1 (the success measure; 0/1 for envs that reward only a solved task)."""
        return min(1.0, self.reward)

    @property
    def num_turns(self) -> int:
        """Assistant turns taken."""
        return len(self.rewards)

    def row(self, transcripts: bool = False) -> dict[str, Any]:
        """The episode as a suite item's fields: ``reward`` (the score), ``return``, ``turns``, ``terminated``,
        ``undecided`` where the env could not score it and, with ``transcripts``, ``transcript: {"messages",
        "steps"}``."""
        out: dict[str, Any] = {
            "reward": self.score,
            "return": self.reward,
            "turns": self.num_turns,
            "terminated": self.terminated,
        }
        if self.undecided:
            out["undecided"] = self.undecided
        if transcripts:
            out["transcript"] = {"messages": list(self.messages), "steps": list(self.steps)}
        return out


def step_record(
    completion: Any, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
) -> dict[str, Any]:
    """One turn of a transcript: what the env said about the action, and how the generation ended."""
    return {
        "reward": float(reward),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "finish_reason": getattr(completion, "finish_reason", None),
        "tokens": len(getattr(completion, "token_ids", None) or []),
        "info": dict(info),
    }


def run_episodes(
    sampler: Any,
    make_env: Callable[[], Any],
    task_ids: Sequence[str],
    params: SamplingParams,
    *,
    n: int = 1,
    seeds: SeedFn | None = None,
    batch_size: int | None = None,
    max_turns: int | None = None,
    tokens: bool = False,
    transcripts: bool = False,
    timer: Callable[[str], AbstractContextManager[Any]] | None = None,
    progress: bool = False,
    desc: str = "episodes",
    read_progress: bool = False,
    reuse_prefixes: bool = True,
    starts: Sequence[Sequence[str]] | None = None,
) -> list[list[Episode]]:
    """``n`` episodes of each task in ``task_ids`` (one list per task, in order), see the module docstring.

    ``make_env`` builds a fresh env per episode. An episode ends when its env terminates or truncates, or
    after ``max_turns`` turns when given; without ``max_turns`` the env's own turn limit (``max_turns`` of the
    env, per task where the env sizes it by the task) is the only cap, so no episode is cut below what its task
    needs. ``tokens`` sends token ids (``sampler.encode`` of the env's prompt)
    and records each turn's (prompt ids, completion ids) in :attr:`Episode.turns`; otherwise the sampler gets
    the chat messages. ``timer(name)`` wraps the ``"generation"`` and ``"verification"`` (env) phases.
    ``progress`` shows a tqdm bar over finished episodes, with the current turn and live episodes beside it.
    ``read_progress`` stores each env's :meth:`~pivotgym.env.AgentEnv.progress` in :attr:`Episode.progress`
    once its episode is over (the E2E partial-progress reward). With ``reuse_prefixes`` a sampler that offers
    ``reuse_prefixes()`` (the transformers one) keeps each prompt's key/value rows for the run, so an episode's
    next turn prefills only the reply and the env's answer, not its whole history again (same samples); the
    policy must not change during the call. ``starts`` gives, per task, actions replayed through ``step`` after
    the reset: the episodes start from the state they reach (E2E RL from the expert's states). Replayed actions
    are neither sampled nor recorded as turns, and ``max_turns`` counts the sampled turns only."""
    from tqdm.auto import tqdm

    if starts is not None and len(starts) != len(task_ids):
        raise ValueError(f"starts has {len(starts)} entries for {len(task_ids)} tasks")

    phase = timer or (lambda _name: contextlib.nullcontext())
    out: list[list[Episode]] = []
    size = batch_size or max(1, len(task_ids))
    reuse = getattr(sampler, "reuse_prefixes", None) if reuse_prefixes else None
    with (
        reuse() if reuse is not None else contextlib.nullcontext(),
        tqdm(
            total=len(task_ids) * n, desc=desc, unit="episode", disable=not progress, leave=False, dynamic_ncols=True
        ) as bar,
    ):
        for start in range(0, len(task_ids), size):
            group = list(range(start, min(start + size, len(task_ids))))
            out += _run_group(
                sampler,
                make_env,
                task_ids,
                group,
                params,
                n,
                seeds,
                max_turns,
                tokens,
                transcripts,
                phase,
                bar,
                read_progress,
                starts,
            )
    return out


def _run_group(
    sampler: Any,
    make_env: Callable[[], Any],
    task_ids: Sequence[str],
    group: Sequence[int],
    params: SamplingParams,
    n: int,
    seeds: SeedFn | None,
    max_turns: int | None,
    tokens: bool,
    transcripts: bool,
    phase: Callable[[str], AbstractContextManager[Any]],
    bar: Any,
    read_progress: bool = False,
    starts: Sequence[Sequence[str]] | None = None,
) -> list[list[Episode]]:
    """The episodes of the tasks ``group`` (indices into ``task_ids``), all advancing together."""
    envs = [[make_env() for _ in range(n)] for _ in group]
    prefixes = [list(starts[g]) if starts is not None else [] for g in group]
    episodes = [[Episode(task_ids[g], start=len(prefix)) for _ in range(n)] for g, prefix in zip(group, prefixes)]
    for g, row, prefix in zip(group, envs, prefixes):
        for env in row:
            _start(env, task_ids[g], prefix)
    turn = 0
    while max_turns is None or turn < max_turns:
        shared: list[tuple[int, Any]] = []  # (group position, prompt): every episode of the task, sampled n times
        single: list[tuple[int, int, Any]] = []  # (group position, episode, prompt): sampled once
        for p, row in enumerate(envs):
            live = [j for j in range(n) if not episodes[p][j].done]
            prompts = [_prompt(sampler, row[j], tokens) for j in live]
            if n > 1 and len(live) == n and all(q == prompts[0] for q in prompts):
                shared.append((p, prompts[0]))
            else:
                single.extend((p, j, q) for j, q in zip(live, prompts))
        if not shared and not single:
            break
        bar.set_postfix(turn=turn + 1, live=len(single) + n * len(shared))  # moves while episodes are long
        with phase("generation"):
            shared_out = _sample(
                sampler, [q for _, q in shared], n, params, seeds, [(group[p], turn, 0) for p, _ in shared]
            )
            single_out = _sample(
                sampler, [q for _, _, q in single], 1, params, seeds, [(group[p], turn, j + 1) for p, j, _ in single]
            )
        moves = [(p, j, q, c) for (p, q), comps in zip(shared, shared_out) for j, c in enumerate(comps)]
        moves += [(p, j, q, comps[0]) for (p, j, q), comps in zip(single, single_out)]
        with phase("verification"):
            for p, j, prompt, completion in moves:
                if getattr(completion, "finish_reason", None) == "error":  # nothing to act on: the episode ends
                    reward, terminated, truncated = 0.0, False, True
                    info = {"error": "sampler", "error_message": completion.text}
                else:
                    _obs, reward, terminated, truncated, info = envs[p][j].step(completion.text)
                episode = episodes[p][j]
                episode.rewards.append(float(reward))
                episode.tokens += len(getattr(completion, "token_ids", None) or [])
                if tokens:
                    episode.turns.append((list(prompt), list(completion.token_ids)))
                if transcripts:
                    episode.steps.append(step_record(completion, reward, terminated, truncated, info))
                episode.terminated, episode.truncated = bool(terminated), bool(truncated)
                episode.done = episode.terminated or episode.truncated
                episode.undecided = str(info["undecided"]) if episode.done and info.get("undecided") else None
                if episode.done:
                    bar.update(1)
        turn += 1
    bar.update(sum(not e.done for row in episodes for e in row))  # cut off by max_turns
    if transcripts:
        for row, eps in zip(envs, episodes):
            for env, episode in zip(row, eps):
                episode.messages = list(env.messages)
    if read_progress:
        for row, eps in zip(envs, episodes):
            for env, episode in zip(row, eps):
                value = getattr(env, "unwrapped", env).progress()
                episode.progress = None if value is None else float(value)
    return episodes


def _start(env: Any, task_id: str, prefix: Sequence[str]) -> None:
    """Reset ``env`` to ``task_id`` and replay ``prefix``; an action of it that ends the episode is an error
    (nothing would be left to sample)."""
    env.reset(options={"task_id": task_id})
    for i, action in enumerate(prefix):
        _obs, _reward, terminated, truncated, _info = env.step(action)
        if terminated or truncated:
            raise ValueError(
                f"task {task_id!r}: replayed action {i + 1} of {len(prefix)} ended the episode; a start state must "
                "leave at least one turn to sample"
            )


def _prompt(sampler: Any, env: Any, tokens: bool) -> Any:
    """What the sampler is given for ``env``'s next turn: token ids with ``tokens``, else chat messages."""
    messages = env.prompt_messages(env.messages)
    return sampler.encode(messages) if tokens else messages


def _sample(
    sampler: Any,
    prompts: list[Any],
    n: int,
    params: SamplingParams,
    seeds: SeedFn | None,
    slots: list[tuple[int, int, int]],
) -> list[list[Any]]:
    """``n`` completions per prompt: one plain sampler call, or seeded per prompt when ``seeds`` is given."""
    if not prompts:
        return []
    if seeds is None:
        return sampler.sample(prompts, n=n, params=params)
    return sample_seeded(sampler, prompts, n, params, [seeds(*slot) for slot in slots])


def greedy_episodes(
    sampler: Any,
    make_env: Callable[[], Any],
    tasks: Sequence[Any],
    params: SamplingParams,
    batch_size: int = 8,
    *,
    transcripts: bool = False,
    progress: bool = True,
    desc: str = "episodes",
) -> list[dict[str, Any]]:
    """One episode per task (``Task`` objects or ids), as suite item rows (:meth:`Episode.row`): ``reward``
    is the episode's score, ``return`` its return, plus ``turns``, ``terminated`` and the transcript."""
    ids = [getattr(t, "id", t) for t in tasks]
    groups = run_episodes(
        sampler, make_env, ids, params, batch_size=batch_size, transcripts=transcripts, progress=progress, desc=desc
    )
    return [episodes[0].row(transcripts) for episodes in groups]


__all__ = ["Episode", "SeedFn", "greedy_episodes", "run_episodes", "step_record"]
