"""Turn accuracy: one greedy action from each held-out expert state, judged by the env's functional verifier.

This is PivotRL's own unit of training (one action from an expert state) measured on states no method trained
on, so it moves before whole-episode success does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.sampling.base import Prompt, Sampler, SamplingParams, sample_seeded
from pivotgym.types import Completion, Trajectory

__all__ = ["AnswerSheet", "TurnAccuracy", "turn_accuracy"]


@dataclass
class TurnAccuracy:
    """Per-task turn accuracy of one sampler.

    ``per_task`` follows the first-seen order of ``task_ids``; ``states`` counts every expert state measured,
    ``failed`` those whose verification failed (timeout, crash, verifier error), which are left out of their
    task's share rather than counted as wrong; ``answered`` those whose answer was given (``answers``) rather
    than generated."""

    task_ids: list[str]
    per_task: list[float]
    states: int
    failed: int
    #: failed verifications per task id (only tasks with at least one)
    failed_by_task: dict[str, int] = field(default_factory=dict)
    answered: int = 0
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
    answers: Sequence[Completion] = (),
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

    ``answers`` are greedy answers already decoded elsewhere (:func:`pivotgym.eval.likelihood.likelihood_scores`
    with ``decode=True`` decodes them on its scoring pass), each carrying its prompt's token ids: a state whose
    prompt encodes to one of them is judged on that answer instead of being generated again.
    """
    from tqdm.auto import tqdm

    from pivotgym.pivot.profile import profile_trajectories

    trajectories = list(trajectories)
    sheet = AnswerSheet(sampler, answers) if answers else None
    rewards: dict[tuple[str, int], float] = {}
    by_task: dict[str, list[float]] = {t.task_id: [] for t in trajectories}
    failed: dict[str, int] = {}
    states = 0
    bar = tqdm(
        total=sum(len(t.turns()) for t in trajectories),
        desc="turn accuracy",
        unit="state",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for group in _groups(sorted(trajectories, key=_history_chars), max(1, chunk)):
            result = profile_trajectories(
                group,
                sheet or sampler,
                k=1,
                params=params,
                executor=executor,
                verifier=verifier,
                chunk=max(1, chunk),
                progress=False,
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
        answered=sheet.answered if sheet else 0,
        rewards=rewards,
    )


class AnswerSheet:
    """A greedy sampler that returns the given answer for a prompt it has one for (matched by the prompt's
    token ids, :attr:`~pivotgym.types.Completion.prompt_token_ids`) and asks ``sampler`` for the others, in
    one batched call. Only for greedy decoding, one answer per prompt: the answers are what greedy decoding
    emits, not samples."""

    prompt_seeds = True  # answers do not depend on seeds; the rest go to ``sampler`` with theirs

    def __init__(self, sampler: Sampler, answers: Sequence[Completion]) -> None:
        self.sampler = sampler
        self.answers = {tuple(a.prompt_token_ids): a for a in answers}
        self.answered = 0

    def describe(self) -> dict[str, Any]:
        return self.sampler.describe()

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        params: SamplingParams | None = None,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        if params is None or params.temperature > 0 or n != 1 or params.stop:
            raise ValueError("an AnswerSheet answers greedy decoding (temperature 0, n = 1, no stop strings) only")
        keys = [tuple(self.sampler.encode(p)) for p in prompts]  # type: ignore[attr-defined]
        rest = [i for i, key in enumerate(keys) if key not in self.answers]
        asked = [prompts[i] for i in rest]
        if not asked:
            generated = []
        elif seeds is not None:
            generated = sample_seeded(self.sampler, asked, n, params, [seeds[i] for i in rest])
        else:
            generated = self.sampler.sample(asked, n=n, params=params)
        out: list[list[Completion]] = [[self.answers[key]] if key in self.answers else [] for key in keys]
        for i, group in zip(rest, generated):
            out[i] = group
        self.answered += len(prompts) - len(rest)
        return out


def _history_chars(trajectory: Trajectory) -> int:
    """The characters of a trajectory's messages: the order of its prompts' token lengths, without a tokenizer."""
    return sum(len(str(m.get("content") or "")) for m in trajectory.messages)


def _groups(trajectories: Sequence[Trajectory], states: int) -> list[list[Trajectory]]:
    """Consecutive trajectories in groups of at least ``states`` expert states (the last may hold fewer):
    one profiler call per group, so the progress bar moves while the states' answers stay batched."""
    groups: list[list[Trajectory]] = [[]]
    count = 0
    for trajectory in trajectories:
        if count >= states:
            groups.append([])
            count = 0
        groups[-1].append(trajectory)
        count += len(trajectory.turns())
    return [g for g in groups if g]
