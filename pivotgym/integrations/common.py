"""What every trainer adapter shares: judging a completion at a pivot state carried as dataset columns.

A dataset row carries the exact state as JSON (``state``: an :class:`~pivotgym.types.ExpertState`) and the
functions offered there (``tools_json``); :class:`StateJudge` rebuilds the :class:`~pivotgym.verify.VerifyContext`
once per state (cached under the state's key) and judges candidates with the env's verifier through a
:class:`~pivotgym.verify.Judge`, as our own trainer's scorer does.
"""

from __future__ import annotations

from typing import Any

from pivotgym.pivot.formats import state_of_row
from pivotgym.states import expert_state
from pivotgym.types import TurnProfile, Verdict
from pivotgym.verify import Judge, VerifyContext

__all__ = ["StateJudge", "unprofiled_pivots"]


class StateJudge:
    """Judges candidate texts at states given as (``state`` JSON, ``tools_json``) with the env's verifier.

    ``verifier`` is ``functional`` (the env's functional verifier), ``exact`` or a registered verifier name.
    Contexts are kept per state (training revisits them); one judge belongs to one process.
    """

    def __init__(self, verifier: str = "functional", max_contexts: int | None = 256) -> None:
        self.verifier = verifier
        self.max_contexts = max_contexts
        self._judge: Judge | None = None

    def __getstate__(self) -> dict[str, Any]:  # cached envs stay in the process that made them
        return {**self.__dict__, "_judge": None}

    def _get_judge(self) -> Judge:
        if self._judge is None:
            from pivotgym.registry import get_registry

            self._judge = Judge(lambda name: get_registry().make_verifier(name), max_contexts=self.max_contexts)
        return self._judge

    def verdict(self, state: str, tools_json: str | None, candidate: str) -> Verdict:
        """The verdict on ``candidate`` at ``state`` (never raises for the verifier: a verifier error is an
        undecided verdict, see :attr:`pivotgym.types.Verdict.undecided`)."""
        from pivotgym.registry import get_registry

        expert = state_of_row(state, tools_json)
        name = get_registry().verifier_name_for(expert.env_id, self.verifier)
        return self._get_judge().verdict(name, expert.key, lambda: VerifyContext.at(expert), candidate)


def unprofiled_pivots(env_id: str, n: int) -> list[TurnProfile]:
    """The first turn of ``n`` expert trajectories of ``env_id`` (its first split) as placeholder pivot rows
    (unprofiled: no samples, mean 0) carrying their states: pivots for trying an adapter without a profiling
    run."""
    from pivotgym.registry import make

    env = make(env_id)
    trajectories = list(env.expert_trajectories(next(iter(env.splits)), limit=n))
    return [
        TurnProfile(
            trajectory_id=state.trajectory_id,
            turn=0,
            env_id=state.env_id,
            task_id=state.task_id,
            k=0,
            rewards=[],
            mean=0.0,
            var=0.0,
            reasons=[],
            reference={"note": "unprofiled demo state"},
            verifier={},
            key=state.trajectory_id,
            state=state,
        )
        for state in (expert_state(t, 0) for t in trajectories if t.assistant_turns())
    ]
