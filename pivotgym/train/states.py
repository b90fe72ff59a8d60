"""Pivot states as training and evaluation items: prompt token ids plus a way to score completions.

A pivot-set row names a trajectory and a turn; the prompt is rebuilt exactly as the profiler built it
(``env.prompt_messages(turn.prefix)`` through the sampler's chat template), completions are as long as the
profiler and evaluation allow there (the env's own generation limit), and they are scored with
the env's functional verifier from the exact state at that turn (:class:`~pivotgym.verify.VerifyContext`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.env import DEFAULT_MAX_NEW_TOKENS, generation_cap
from pivotgym.types import Trajectory, Turn, TurnProfile
from pivotgym.verify import Judge, VerifyContext, trajectory_tools


@dataclass
class PivotState:
    """One pivot state: where it comes from, its prompt ids, and its verifier's registry name."""

    index: int
    turn: Turn
    prompt_ids: list[int]
    verifier: str
    profile: TurnProfile | None = None
    #: the functions the trajectory offered (imported rows carry their own), passed to the verifier
    tools: list[dict[str, Any]] | None = None
    #: the longest completion sampled here: its env's own generation limit, shortened by the trainer's cap
    #: (:func:`pivotgym.env.generation_cap`, as in evaluation and profiling)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS


def _registry_judge() -> Judge:
    """A judge making verifiers through the registry, keeping every state's context (training revisits them)."""
    from pivotgym.registry import get_registry

    return Judge(lambda name: get_registry().make_verifier(name), max_contexts=None)


@dataclass
class StateScorer:
    """Scores completion texts at pivot states through a :class:`~pivotgym.verify.Judge` (verifiers and
    positioned env contexts cached)."""

    judge: Judge = field(default_factory=_registry_judge)

    def score(self, state: PivotState, texts: Sequence[str]) -> list[float]:
        """Rewards of ``texts`` at ``state`` (a failed verification scores 0: for evaluation)."""
        return [0.0 if r is None else r for r in self.score_judged(state, texts)]

    def score_judged(self, state: PivotState, texts: Sequence[str]) -> list[float | None]:
        """Rewards of ``texts`` at ``state``, None where the verification was undecided (timeout, verifier
        error, a verifier that could not judge: :attr:`pivotgym.types.Verdict.undecided`): training leaves
        those samples out of the group."""

        def make() -> VerifyContext:
            return VerifyContext(state.turn, tools=state.tools)

        return [self.judge.reward(state.verifier, state.index, make, text) for text in texts]


def load_pivot_states(
    pivots: str | Path,
    trajectories: str | Path,
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    cap: int | None = None,
) -> list[PivotState]:
    """The states of a pivot-set file, with prompts encoded by ``encode`` (a sampler's ``encode``); ``cap``
    can only shorten each state's generation limit (its env's own)."""
    from pivotgym.jsonl import read_pivot_set, read_trajectories

    pivot_set = read_pivot_set(pivots)
    if not pivot_set.pivots:
        raise ValueError(f"{pivots}: the pivot set is empty; select with a looser rule (pivotgym select)")
    by_id = {t.id: t for t in read_trajectories(trajectories)}
    return states_from_profiles(pivot_set.pivots, by_id, encode, verifier, source=str(pivots), cap=cap)


def states_from_profiles(
    profiles: Sequence[TurnProfile],
    trajectories: dict[str, Trajectory],
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    source: str = "pivot set",
    cap: int | None = None,
) -> list[PivotState]:
    """The states of pivot-set rows (``trajectories`` by id); ``cap`` only shortens each env's own limit."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    envs: dict[str, Any] = {}
    states = []
    for i, profile in enumerate(profiles):
        trajectory = trajectories.get(profile.trajectory_id)
        if trajectory is None:
            raise ValueError(
                f"{source}: pivot {i} points to trajectory {profile.trajectory_id!r}, which is not in "
                "the trajectories file; pass the file the profile was made from"
            )
        turn = trajectory.turn(profile.turn)
        env = envs.get(turn.env_id) or envs.setdefault(turn.env_id, registry.make(turn.env_id))
        prompt_ids = encode(env.prompt_messages(turn.prefix))
        states.append(
            PivotState(
                i,
                turn,
                prompt_ids,
                registry.verifier_name_for(turn.env_id, verifier),
                profile,
                trajectory_tools(trajectory),
                generation_cap(env, cap),
            )
        )
    return states


def states_from_trajectories(
    trajectories: Sequence[Trajectory],
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    cap: int | None = None,
) -> list[PivotState]:
    """Every assistant turn of ``trajectories`` as a state (for evaluation without a pivot set); ``cap`` only
    shortens each env's own generation limit."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    envs: dict[str, Any] = {}
    states: list[PivotState] = []
    for trajectory in trajectories:
        env = envs.get(trajectory.env_id) or envs.setdefault(trajectory.env_id, registry.make(trajectory.env_id))
        for turn in trajectory.turns():
            states.append(
                PivotState(
                    len(states),
                    turn,
                    encode(env.prompt_messages(turn.prefix)),
                    registry.verifier_name_for(turn.env_id, verifier),
                    tools=trajectory_tools(trajectory),
                    max_new_tokens=generation_cap(env, cap),
                )
            )
    return states


__all__ = ["PivotState", "StateScorer", "load_pivot_states", "states_from_profiles", "states_from_trajectories"]
