"""The floor and ceiling of turn accuracy: what a uniformly random legal action and the expert itself score on
the held-out expert states, and how many distinct actions the verifier credits there.

Turn accuracy (:mod:`pivotgym.eval.turns`) means little without these two numbers. A domain where a state has
three legal actions and one of them is right gives a random policy ~33%; a verifier that credits only the
expert's own action turns "functional reward" into exact match. So at every state of the split's expert
trajectories (every assistant turn, the states turn accuracy measures) this module:

* asks the env for its legal actions (:meth:`~pivotgym.env.AgentEnv.legal_actions`), or, where it cannot
  enumerate them, for its candidate actions (:meth:`~pivotgym.env.AgentEnv.candidate_actions`: a finite set of
  plausible actions, e.g. for tau2 every action of the task's own expert trajectory); a state where the env
  answers None to both, or offers no action at all, is counted and left out. The result names the set it
  judged (``action_set``): over candidates the floor is that naive policy's, not a random legal action's;
* judges each legal action, and the expert's own action, with the env's verifier through the same path the
  profiler uses (:class:`~pivotgym.pivot.profile.VerifyTask` and :func:`~pivotgym.pivot.profile.map_verify`
  fanned out over an :class:`~pivotgym.execution.Executor`), so a verdict here is the verdict turn accuracy
  and training would give that text;
* keeps per state ``n_legal``, ``n_credited`` (reward at least ``credit``, default full credit) and whether the
  expert's action is credited, and averages per problem, then over problems, as turn accuracy does.

The aggregates: ``random_legal`` (mean reward of a uniformly random legal action: turn accuracy's floor),
``expert`` (mean reward of the expert's action: its ceiling, below 1 where the verifier refuses the expert),
``multi_credit`` (share of states where the verifier credits two or more distinct legal actions), and the mean
legal and credited counts. A state with any undecided verification (timeout, crash, a verifier that could not judge)
is left out of every aggregate and counted in ``failed``, so a flaky verifier cannot lower a floor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.eval.stats import MeanInterval, mean_interval_over
from pivotgym.states import expert_states
from pivotgym.types import ExpertState, Trajectory

__all__ = ["METRICS", "FloorsResult", "StateFloor", "floor_label", "floors", "legal_states"]

#: the per-problem metrics of :class:`FloorsResult`, in report order
METRICS = ("random_legal", "expert", "multi_credit", "legal", "credited")
#: the metrics that are shares (their intervals lie within [0, 1])
SHARES = ("random_legal", "expert", "multi_credit")


@dataclass
class StateFloor:
    """One held-out expert state: its legal actions and their verdicts.

    ``rewards[i]`` is the verifier's reward (capped at 1) for ``legal[i]``; ``expert_reward`` the reward of the
    expert's own action. ``failed`` counts undecided verifications; a state with any is not judged
    (``judged`` is False) and takes no part in the aggregates."""

    task_id: str
    trajectory_id: str
    turn: int
    legal: list[str]
    rewards: list[float]
    expert_reward: float
    credit: float = 1.0
    failed: int = 0
    failed_reasons: list[str] = field(default_factory=list)
    #: the expert state itself, for scorers that need the prompt; not serialised
    state: ExpertState | None = field(default=None, repr=False, compare=False)
    #: ``legal`` (the env's legal actions) or ``candidate`` (its candidate actions)
    action_set: str = "legal"

    @property
    def judged(self) -> bool:
        return self.failed == 0 and bool(self.legal)

    @property
    def n_legal(self) -> int:
        return len(self.legal)

    @property
    def credited(self) -> list[bool]:
        """Per legal action: whether the verifier credits it (reward at least ``credit``)."""
        return [r >= self.credit - 1e-9 for r in self.rewards]

    @property
    def n_credited(self) -> int:
        return sum(self.credited)

    @property
    def expert_credited(self) -> bool:
        return self.expert_reward >= self.credit - 1e-9

    @property
    def random_legal(self) -> float:
        """The expected reward of a uniformly random legal action (turn accuracy's floor at this state)."""
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0

    def metrics(self) -> dict[str, float]:
        """This state's value of each of :data:`METRICS`."""
        return {
            "random_legal": self.random_legal,
            "expert": self.expert_reward,
            "multi_credit": float(self.n_credited >= 2),
            "legal": float(self.n_legal),
            "credited": float(self.n_credited),
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "trajectory_id": self.trajectory_id,
            "turn": self.turn,
            "legal": list(self.legal),
            "rewards": list(self.rewards),
            "action_set": self.action_set,
            "n_legal": self.n_legal,
            "n_credited": self.n_credited,
            "expert_reward": self.expert_reward,
            "expert_credited": self.expert_credited,
        }
        if self.failed:
            out["failed"] = self.failed
            out["failed_reasons"] = list(self.failed_reasons)
        return out


@dataclass
class FloorsResult:
    """The floors of one env and split: per state (:attr:`states`, judged or not), per problem and overall.

    ``task_ids`` lists the problems with at least one judged state (first-seen order); ``per_task[metric]`` is
    aligned with it, each value the mean over that problem's judged states. Overall values are means over
    problems, as turn accuracy's. ``no_legal`` counts states where the env could not enumerate its legal
    actions (or had none), ``failed`` those left out for an undecided verification."""

    env_id: str
    split: str
    verifier: str
    credit: float
    states: list[StateFloor]
    task_ids: list[str]
    per_task: dict[str, list[float]]
    no_legal: int
    failed: int
    elapsed_s: float = 0.0
    #: the action set the judged states offered: ``legal``, ``candidate`` (the env's candidate actions, described
    #: by :attr:`action_set_description`) or ``mixed``
    action_set: str = "legal"
    action_set_description: str = ""

    @property
    def judged(self) -> int:
        """The number of states in the aggregates."""
        return sum(s.judged for s in self.states)

    def value(self, metric: str) -> float:
        """The mean over problems of ``metric`` (one of :data:`METRICS`; NaN without any judged problem)."""
        values = self.per_task[metric]
        return sum(values) / len(values) if values else float("nan")

    @property
    def random_legal(self) -> float:
        return self.value("random_legal")

    @property
    def expert(self) -> float:
        return self.value("expert")

    @property
    def multi_credit(self) -> float:
        return self.value("multi_credit")

    def per_item(self, metric: str) -> dict[str, float]:
        """``{task id: value}`` of ``metric``: what a paired comparison with turn accuracy's per-task scores
        takes (:func:`pivotgym.eval.stats.paired_t_interval`)."""
        return dict(zip(self.task_ids, self.per_task[metric]))

    def interval(self, metric: str, method: str = "t", confidence: float = 0.95) -> MeanInterval:
        """The interval over problems of ``metric`` (:func:`pivotgym.eval.stats.mean_interval_over`)."""
        bounds = (0.0, 1.0) if metric in SHARES else None  # a share's interval stays within [0, 1]
        return mean_interval_over(self.per_task[metric], method, confidence, bounds)

    def to_dict(self, *, states: bool = False, method: str = "t") -> dict[str, Any]:
        """JSON-ready summary: each metric's value and interval over problems, the counts, the per-problem
        values (``per_task``) and, with ``states``, every state's row."""
        out: dict[str, Any] = {
            "env_id": self.env_id,
            "split": self.split,
            "verifier": self.verifier,
            "credit": self.credit,
            "problems": len(self.task_ids),
            "states": len(self.states),
            "judged_states": self.judged,
            "no_legal": self.no_legal,
            "failed": self.failed,
            "action_set": self.action_set,
            "action_set_description": self.action_set_description,
            "elapsed_s": round(self.elapsed_s, 3),
            "metrics": {m: self.interval(m, method).to_dict() for m in METRICS},
            "task_ids": list(self.task_ids),
            "per_task": {m: list(v) for m, v in self.per_task.items()},
        }
        if states:
            out["state_rows"] = [s.to_dict() for s in self.states]
        return out


def legal_states(env: Any, trajectories: Iterable[Trajectory]) -> Iterable[tuple[ExpertState, list[str] | None, str]]:
    """Every expert state of ``trajectories`` with the actions the floors judge there and which set they are:
    the env's legal actions (``"legal"``), else its candidate actions (``"candidate"``), else None (``""``),
    distinct and in the env's order. The env walks each trajectory once: reset to its task, then at each turn
    read the actions and step the expert's action, the replay :meth:`AgentEnv.goto` does (the expert
    trajectories are the env's own history, so the states are the same)."""
    for trajectory in trajectories:
        env.reset(options={"task_id": trajectory.task_id})
        for state in expert_states([trajectory]):
            actions, kind = env.legal_actions(), "legal"
            if actions is None:
                actions, kind = env.candidate_actions(), "candidate"
            if actions is None:
                yield state, None, ""
            else:
                yield state, list(dict.fromkeys(str(a) for a in actions)), kind
            env.step(env.render_action(state.turn.expert))


def floors(
    env: Any,
    split: str = "test",
    limit: int | None = None,
    *,
    trajectories: Sequence[Trajectory] | None = None,
    executor: Any = None,
    verifier: str = "functional",
    credit: float = 1.0,
    timeout: float | None = 60.0,
    chunk: int = 32,
    progress: bool = True,
) -> FloorsResult:
    """The floors of ``env`` (an env or a registered env id) on ``split``'s expert trajectories (the first
    ``limit`` of them, or ``trajectories`` when given): see the module docstring.

    ``executor`` runs the verifications (an :class:`~pivotgym.execution.Executor` kept warm, or a name such
    as ``serial``; default: worker processes), ``chunk`` states at a time with ``timeout`` seconds each;
    ``verifier`` is the env's functional verifier unless another name is given; ``credit`` is the reward at
    which an action counts as credited."""
    import time

    from tqdm.auto import tqdm

    from pivotgym.execution import Executor, chunks, make_executor
    from pivotgym.pivot.profile import VerifyTask, map_verify
    from pivotgym.registry import get_registry
    from pivotgym.verify import failed_verification

    start = time.perf_counter()
    registry = get_registry()
    if isinstance(env, str):
        env = registry.make(env)
    env_id = env.env_id
    verifier_name = registry.verifier_name_for(env_id, verifier)
    if trajectories is None:
        trajectories = list(env.expert_trajectories(split, limit=limit))
    else:
        trajectories = list(trajectories)[:limit] if limit is not None else list(trajectories)
    own = not isinstance(executor, Executor)
    pool = make_executor(executor, timeout=timeout)
    rows: list[StateFloor] = []
    no_legal = 0
    bar = tqdm(
        total=sum(len(t.turns()) for t in trajectories),
        desc=f"floors {env_id}",
        unit="state",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for group in chunks(legal_states(env, trajectories), max(1, chunk)):
            tasks: list[VerifyTask] = []
            owners: list[StateFloor] = []
            for state, legal, kind in group:
                turn = state.turn
                row = StateFloor(
                    turn.task_id,
                    turn.trajectory_id,
                    turn.turn,
                    legal or [],
                    [],
                    0.0,
                    credit,
                    state=state,
                    action_set=kind or "legal",
                )
                rows.append(row)
                if not legal:  # None: the env cannot enumerate; []: nothing to choose from
                    no_legal += 1
                    continue
                tasks.append(VerifyTask(verifier_name, state, (*legal, env.render_action(turn.expert))))
                owners.append(row)
            for row, task, result in zip(owners, tasks, map_verify(pool, tasks, timeout)):
                got: list[float] = []
                for i in range(len(task.candidates)):
                    value = result.value[i] if result.ok else None
                    if value is None or value.get("undecided"):
                        row.failed += 1
                        why = failed_verification(result.error).reason if value is None else str(value["undecided"])
                        row.failed_reasons.append(why[:200])
                        got.append(0.0)
                    else:
                        got.append(min(1.0, float(value["reward"])))
                row.rewards, row.expert_reward = got[:-1], got[-1]
            bar.update(len(group))
            bar.set_postfix(no_legal=no_legal, failed=sum(r.failed > 0 for r in rows), refresh=False)
    finally:
        bar.close()
        if own:
            pool.close()
    by_task: dict[str, list[StateFloor]] = {}
    for row in rows:
        if row.judged:
            by_task.setdefault(row.task_id, []).append(row)
    per_task: dict[str, list[float]] = {m: [] for m in METRICS}
    for task_rows in by_task.values():
        metrics = [r.metrics() for r in task_rows]
        for m in METRICS:
            per_task[m].append(sum(v[m] for v in metrics) / len(metrics))
    return FloorsResult(
        env_id=env_id,
        split=split,
        verifier=verifier_name,
        credit=credit,
        states=rows,
        task_ids=list(by_task),
        per_task=per_task,
        no_legal=no_legal,
        failed=sum(r.failed > 0 for r in rows),
        elapsed_s=time.perf_counter() - start,
        action_set=_action_set(rows),
        action_set_description=env.candidate_description if any(r.action_set == "candidate" for r in rows) else "",
    )


def floor_label(action_set: str) -> str:
    """How the floor row is labelled for a result over ``action_set`` (``legal``, ``candidate`` or ``mixed``)."""
    return f"random {'candidate' if action_set == 'candidate' else 'legal'} action (floor)"


def _action_set(rows: Sequence[StateFloor]) -> str:
    """``legal``, ``candidate`` or ``mixed``: the sets the judged states offered."""
    kinds = {row.action_set for row in rows if row.judged}
    return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "legal")
