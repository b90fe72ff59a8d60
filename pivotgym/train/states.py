"""Pivot states as training and evaluation items: prompt token ids plus a way to score completions.

Every item is an :class:`~pivotgym.types.ExpertState` (:mod:`pivotgym.states`), the one a pivot-set or profile
row carries; the prompt is built from it exactly as the profiler built it (``env.prompt_messages(prefix)``
through the sampler's chat template), completions are as long as the profiler and evaluation allow there (the
env's own generation limit), and they are scored with the env's functional verifier from the exact state
(:meth:`~pivotgym.verify.VerifyContext.at`), its context cached under the state's key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.env import DEFAULT_MAX_NEW_TOKENS, generation_cap
from pivotgym.states import expert_states, states_of
from pivotgym.types import ExpertState, Trajectory, Turn, TurnProfile
from pivotgym.verify import Judge, VerifyContext, add_cost


@dataclass
class PivotState:
    """One state a trainer samples at: the expert state, its prompt ids, and its verifier's registry name."""

    index: int
    state: ExpertState
    prompt_ids: list[int]
    verifier: str
    profile: TurnProfile | None = None
    #: the longest completion sampled here: its env's own generation limit, shortened by the trainer's cap
    #: (:func:`pivotgym.env.generation_cap`, as in evaluation and profiling)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS

    @property
    def turn(self) -> Turn:
        return self.state.turn

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.state.tools


def _registry_judge() -> Judge:
    """A judge making verifiers through the registry, keeping every state's context (training revisits them)."""
    from pivotgym.registry import get_registry

    return Judge(lambda name: get_registry().make_verifier(name), max_contexts=None)


@dataclass
class StateScorer:
    """Scores completion texts at pivot states through a :class:`~pivotgym.verify.Judge` (verifiers and
    positioned env contexts cached, under each state's key)."""

    judge: Judge = field(default_factory=_registry_judge)

    def score(self, state: PivotState, texts: Sequence[str]) -> list[float]:
        """Rewards of ``texts`` at ``state`` (a failed verification scores 0: for evaluation)."""
        return [0.0 if r is None else r for r in self.score_judged(state, texts)]

    def score_judged(
        self, state: PivotState, texts: Sequence[str], cost: dict[str, float] | None = None
    ) -> list[float | None]:
        """Rewards of ``texts`` at ``state``, None where the verification was undecided (timeout, verifier
        error, a verifier that could not judge: :attr:`pivotgym.types.Verdict.undecided`): training leaves
        those samples out of the group. The texts are judged together (one model call for the ``judge``
        verifier); what their verdicts cost is added to ``cost`` when given."""
        expert = state.state
        verdicts = self.judge.verdicts(state.verifier, expert.key, lambda: VerifyContext.at(expert), texts)
        if cost is not None:
            for verdict in verdicts:
                add_cost(cost, verdict)
        return [v.reward if v.decided else None for v in verdicts]


def encode_states(
    states: Iterable[ExpertState],
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    cap: int | None = None,
    profiles: Sequence[TurnProfile | None] | None = None,
) -> list[PivotState]:
    """``states`` as trainer items, prompts encoded by ``encode`` (a sampler's ``encode``); ``cap`` can only
    shorten each state's generation limit (its env's own); ``profiles[i]`` is kept beside state i."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    envs: dict[str, Any] = {}
    out = []
    for i, state in enumerate(states):
        env = envs.get(state.env_id) or envs.setdefault(state.env_id, registry.make(state.env_id))
        out.append(
            PivotState(
                i,
                state,
                encode(env.prompt_messages(state.turn.prefix)),
                registry.verifier_name_for(state.env_id, verifier),
                profiles[i] if profiles is not None else None,
                generation_cap(env, cap),
            )
        )
    return out


def load_pivot_states(
    pivots: str | Path,
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    cap: int | None = None,
    trajectories: str | Path | None = None,
) -> list[PivotState]:
    """The states of a pivot-set file, prompts encoded by ``encode``; ``trajectories`` is read only for rows
    written before rows carried their state."""
    from pivotgym.jsonl import read_pivot_set

    pivot_set = read_pivot_set(pivots)
    if not pivot_set.pivots:
        raise ValueError(f"{pivots}: the pivot set is empty; select with a looser rule (pivotgym select)")
    return states_from_profiles(
        pivot_set.pivots, encode, verifier, source=str(pivots), cap=cap, trajectories=trajectories
    )


def states_from_profiles(
    profiles: Sequence[TurnProfile],
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    source: str = "pivot set",
    cap: int | None = None,
    trajectories: str | Path | Iterable[Trajectory] | None = None,
) -> list[PivotState]:
    """The states of profile or pivot-set rows (see :func:`pivotgym.states.states_of`; ``trajectories``, a file
    or the trajectories, is read only when a row carries no state); ``cap`` only shortens each env's own limit."""
    if isinstance(trajectories, (str, Path)):  # read only when some row needs it
        from pivotgym.jsonl import read_trajectories

        trajectories = read_trajectories(trajectories) if any(p.state is None for p in profiles) else None
    return encode_states(states_of(profiles, trajectories, source=source), encode, verifier, cap, profiles)


def states_from_trajectories(
    trajectories: Sequence[Trajectory],
    encode: Callable[[list[Any]], list[int]],
    verifier: str = "functional",
    cap: int | None = None,
) -> list[PivotState]:
    """Every assistant turn of ``trajectories`` as a state (for evaluation without a pivot set); ``cap`` only
    shortens each env's own generation limit."""
    return encode_states(expert_states(trajectories), encode, verifier, cap)


__all__ = [
    "PivotState",
    "StateScorer",
    "encode_states",
    "load_pivot_states",
    "states_from_profiles",
    "states_from_trajectories",
]
