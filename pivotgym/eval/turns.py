"""Turn accuracy: one greedy action from each held-out expert state, judged by the env's functional verifier.

This is PivotRL's own unit of training (one action from an expert state) measured on states no method trained
on, so it moves before whole-episode success does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.sampling.base import Sampler, SamplingParams
from pivotgym.types import Trajectory

__all__ = ["TurnAccuracy", "turn_accuracy"]


@dataclass
class TurnAccuracy:
    """Per-task turn accuracy of one sampler.

    ``per_task`` follows the first-seen order of ``task_ids``; ``states`` counts every expert state measured,
    ``failed`` those whose verification failed (timeout, crash, verifier error), which are left out of their
    task's share rather than counted as wrong; ``decided`` those answered from ``decided`` rewards instead of
    generation."""

    task_ids: list[str]
    per_task: list[float]
    states: int
    failed: int
    #: failed verifications per task id (only tasks with at least one)
    failed_by_task: dict[str, int] = field(default_factory=dict)
    decided: int = 0
    #: the reward of each judged state, by ``(trajectory_id, turn)``
    rewards: dict[tuple[str, int], float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        """The mean over tasks (0 when there are none)."""
        return sum(self.per_task) / len(self.per_task) if self.per_task else 0.0


def turn_accuracy(
    sampler: Sampler,
    trajectories: Sequence[Trajectory],
    params: SamplingParams,
    *,
    executor: Any = None,
    chunk: int = 16,
    verifier: str = "functional",
    progress: bool = True,
    decided: Mapping[tuple[str, int], float] | None = None,
) -> TurnAccuracy:
    """Per-task turn accuracy of ``sampler`` on held-out expert ``trajectories``.

    Every assistant turn of every trajectory is a state (the history before the turn, the expert's action);
    the sampler answers each once with ``params`` (greedy decoding capped by the env's generation limit, as
    the caller chooses), and ``verifier`` (default: the env's functional verifier) judges the answer against
    the expert's action. A task's score is the share of its judged states that pass (a reward above 1 counts
    as 1). A failed verification is not a judgement: it is left out of its task's share and counted in
    ``failed``; a task whose every verification failed scores 0. ``executor`` fans the verifications out
    (an :class:`~pivotgym.execution.Executor` kept warm across calls, or a name such as ``serial``).

    Trajectories are answered shortest first, so each batched call holds histories of similar length: a
    left-padded prefill pays the longest row's length for every row, and in the given order one call can mix
    a 3-step plan with a 17-step one (``benchmarks/turn_accuracy.py`` measures the difference). ``per_task``
    still follows the given order.

    ``decided`` maps ``(trajectory_id, turn)`` to the reward of the greedy answer where it is already known
    without generating (:func:`pivotgym.eval.likelihood.chain_scores` names the legal action greedy decoding
    emits, and the floors hold that action's verdict): those states are scored from it and only the others are
    generated and judged.
    """
    from tqdm.auto import tqdm

    from pivotgym.pivot.profile import profile_trajectories

    trajectories = list(trajectories)
    decided = dict(decided or {})
    by_task: dict[str, list[float]] = {t.task_id: [] for t in trajectories}
    failed: dict[str, int] = {}
    states = from_scores = 0
    rewards: dict[tuple[str, int], float] = {}
    for trajectory in trajectories:
        for turn in trajectory.turns():
            key = (turn.trajectory_id, turn.turn)
            if key in decided:
                rewards[key] = min(1.0, float(decided[key]))
                by_task[turn.task_id].append(rewards[key])
                states += 1
                from_scores += 1

    def undecided(trajectory: Trajectory) -> int:
        return sum((t.trajectory_id, t.turn) not in decided for t in trajectory.turns())

    todo = [t for t in trajectories if undecided(t)]
    bar = tqdm(
        total=sum(map(undecided, todo)),
        desc="turn accuracy",
        unit="state",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for group in _groups(sorted(todo, key=_history_chars), max(1, chunk), undecided):
            result = profile_trajectories(
                group,
                sampler,
                k=1,
                params=params,
                executor=executor,
                verifier=verifier,
                chunk=max(1, chunk),
                progress=False,
                only=lambda turn: (turn.trajectory_id, turn.turn) not in decided,
            )
            for profile in result.profiles:
                states += 1
                if profile.rewards:
                    rewards[profile.trajectory_id, profile.turn] = min(1.0, float(profile.mean))
                    by_task[profile.task_id].append(rewards[profile.trajectory_id, profile.turn])
                else:
                    failed[profile.task_id] = failed.get(profile.task_id, 0) + 1
            bar.update(len(result.profiles))
            bar.set_postfix(failed=sum(failed.values()), refresh=False)
    finally:
        bar.close()
    per_task = [sum(v) / len(v) if v else 0.0 for v in by_task.values()]
    return TurnAccuracy(
        task_ids=list(by_task),
        per_task=per_task,
        states=states,
        failed=sum(failed.values()),
        failed_by_task=failed,
        decided=from_scores,
        rewards=rewards,
    )


def _history_chars(trajectory: Trajectory) -> int:
    """The characters of a trajectory's messages: the order of its prompts' token lengths, without a tokenizer."""
    return sum(len(str(m.get("content") or "")) for m in trajectory.messages)


def _groups(
    trajectories: Sequence[Trajectory], states: int, count_states: Callable[[Trajectory], int] | None = None
) -> list[list[Trajectory]]:
    """Consecutive trajectories in groups of at least ``states`` states to answer (``count_states``, default
    every expert state; the last group may hold fewer): one profiler call per group, so the progress bar moves
    while the states' answers stay batched."""
    groups: list[list[Trajectory]] = [[]]
    count = 0
    for trajectory in trajectories:
        if count >= states:
            groups.append([])
            count = 0
        groups[-1].append(trajectory)
        count += count_states(trajectory) if count_states else len(trajectory.turns())
    return [g for g in groups if g]
