"""Expert states: made here, once, and carried by every stage.

An expert state is one assistant turn of an expert trajectory: the history before it, the expert's message
there and the functions offered (:class:`~pivotgym.types.ExpertState`). Its key is a content hash of all of
that, so two stages that see the same state agree on its key without talking to each other:

- the profiler derives each state's sampling stream and cache key from it and writes the state into the row;
- selection keeps the rows, states included, so a pivot set is one self-contained file;
- the trainers, the adapters (TRL, verl) and the floors judge candidates at a state through a context cached
  under its key (:meth:`pivotgym.verify.VerifyContext.at`);
- export writes each state's history as the NeMo-Gym row's input.

Rows written before rows carried their state name a trajectory and a turn; :func:`states_of` rebuilds their
states from the trajectories they were made from.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from pivotgym.types import ExpertState, Trajectory, TurnProfile
from pivotgym.verify import trajectory_tools

__all__ = ["ExpertState", "expert_state", "expert_states", "states_of", "with_states"]


def expert_state(trajectory: Trajectory, turn: int) -> ExpertState:
    """The state at assistant turn ``turn`` (0-based) of ``trajectory``."""
    return ExpertState(trajectory.turn(turn), trajectory_tools(trajectory))


def expert_states(trajectories: Iterable[Trajectory]) -> Iterator[ExpertState]:
    """Every assistant turn of every trajectory as a state, in order."""
    for trajectory in trajectories:
        tools = trajectory_tools(trajectory)
        for turn in trajectory.turns():
            yield ExpertState(turn, tools)


def states_of(
    rows: Sequence[TurnProfile], trajectories: Iterable[Trajectory] | None = None, *, source: str = "pivot set"
) -> list[ExpertState]:
    """The state of each profile or pivot-set row: the one it carries, else the one rebuilt from
    ``trajectories`` (rows written before rows carried their state). A row with neither is an error that
    names the row and what to pass."""
    by_id: dict[str, Trajectory] | None = None
    out = []
    for i, row in enumerate(rows):
        state = row.state
        if state is None:
            if by_id is None:
                by_id = {t.id: t for t in trajectories or ()}
            trajectory = by_id.get(row.trajectory_id)
            if trajectory is None:
                hint = (
                    "pass the trajectories file the profiles were made from"
                    if trajectories is not None
                    else "its rows were written before rows carried their state: pass the trajectories file the "
                    "profiles were made from (--trajectories), or profile and select again"
                )
                raise ValueError(
                    f"{source}: row {i} (trajectory {row.trajectory_id!r}, turn {row.turn}) carries no state "
                    f"and names a trajectory not given; {hint}"
                )
            state = expert_state(trajectory, row.turn)
        out.append(state)
    return out


def with_states(
    rows: Sequence[TurnProfile], trajectories: Iterable[Trajectory] | None = None, *, source: str = "pivot set"
) -> list[TurnProfile]:
    """``rows``, each carrying its state (see :func:`states_of`)."""
    states = states_of(rows, trajectories, source=source)
    return [row if row.state is state else replace(row, state=state) for row, state in zip(rows, states)]
