"""PlanningEnv: solve a PDDL problem one grounded action per turn.

The first observation states the domain's actions, the objects, the facts that never change, the current
state and the goal; each step takes one action as text (``(unstack b a robot)``, ``unstack(b, a)``, ... read
leniently), and the next observation is the new state, or an error naming the failed precondition. The
episode terminates when the goal holds; the executed plan is then checked by VAL and the final reward is 1
when VAL accepts it. Episodes are truncated after a step limit of a few times the optimal plan length.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any

from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task
from pivotgym.types import Message, message
from pivotgym_planning.catalog import OOD_FAMILIES, TRAIN_FAMILIES, family_splits
from pivotgym_planning.model import ActionError, PlanningProblem, load_problem, problem_from_text
from pivotgym_planning.plans import optimal_plan
from pivotgym_planning.search import DEFAULT_MAX_EXPANSIONS, OptimalCost, greedy
from pivotgym_planning.statespace import DEFAULT_MAX_STATES
from pivotgym_planning.val import ValidatorMissing, validate

SYSTEM_PROMPT = (
    "You solve planning problems. Each turn, reply with exactly one action in PDDL form, "
    "for example {example}. You then see the new state."
)

_solutions: dict[str, tuple[list[str], str]] = {}
_solutions_lock = threading.Lock()


def solve(problem: PlanningProblem, max_expansions: int = DEFAULT_MAX_EXPANSIONS) -> tuple[list[str], str] | None:
    """A plan for ``problem`` and the method that found it: optimal A* within ``EXPERT_ASTAR_EXPANSIONS``
    (``"astar"``), else the exact h* table (symmetry-reduced breadth-first search, ``"exact"``; optimal),
    else greedy best-first with hFF (``"gbf"``, not optimal). ``None`` when none finds one. Cached per
    process."""
    with _solutions_lock:
        if problem.key in _solutions:
            return _solutions[problem.key]
    found = optimal_plan(problem, problem.init, max_expansions)
    if found is not None:
        plan, method = found
    else:
        task = problem.search_task()
        result = greedy(task, task.project(problem.init), max_expansions=max_expansions)
        if not result.solved or result.plan is None:
            return None
        plan, method = list(result.plan), "gbf"
    with _solutions_lock:
        _solutions[problem.key] = (plan, method)
    return _solutions[problem.key]


_oracles: dict[str, OptimalCost] = {}


def _oracle(problem: PlanningProblem) -> OptimalCost:
    """One h* oracle per problem and process (A*, then the exact table when A* runs out of budget)."""
    with _solutions_lock:
        if problem.key not in _oracles:
            _oracles[problem.key] = OptimalCost(
                problem.search_task(), table_limit=DEFAULT_MAX_STATES, root=problem.init
            )
        return _oracles[problem.key]


class PlanningEnv(AgentEnv):
    """A pddlgym domain family as a multi-turn text env (see the module docstring).

    With ``generator="blocks"`` or ``"gripper"`` the train, test and warmup splits are generated problems
    (:mod:`pivotgym_planning.generators`: ``n_train``/``n_test``/``n_warmup`` problems of seed ``seed``,
    disjoint by a canonical-state hash) over the pddlgym domain of that name, optionally limited to optimal lengths in
    ``[min_length, max_length]``; every task carries its optimal length in ``metadata["optimal_length"]``
    (also ``"difficulty"``) and its optimal plan is the expert's. The ``ood`` split stays the held-out
    pddlgym families.
    """

    splits: tuple[str, ...] = ("train", "test", "ood")
    error_role = "user"
    #: one grounded action per turn: the expert's are 7-22 tokens in every family, so 64 leaves room for a
    #: slightly wordier reply without letting a rambling one run on for hundreds of tokens
    max_new_tokens = 64
    #: what the ``judge`` verifier is told equivalence means here (the rule verifier compares optimal costs)
    judge_instructions = (
        "Decide whether the CANDIDATE planning action is as good as the EXPERT action in the current state: "
        "applicable there, and leaving the goal exactly as few actions away as the expert's does. An action on an "
        "interchangeable object (another ball, the other gripper) can be as good; a wasted or undoing move is not."
    )

    def __init__(
        self,
        family: str = "blocks",
        *,
        ood_families: list[str] | None = None,
        show_applicable: bool = False,
        step_limit_factor: int = 3,
        max_step_limit: int = 120,
        validate_plans: bool = True,
        generator: str | None = None,
        seed: int = 0,
        n_train: int = 400,
        n_test: int = 200,
        n_warmup: int = 100,
        min_length: int | None = None,
        max_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._fixed_max_turns = kwargs.get("max_turns") is not None
        super().__init__(**kwargs)
        known = {**TRAIN_FAMILIES, **OOD_FAMILIES}
        self.family = known.get(family, family)
        self.ood_families = list(OOD_FAMILIES.values()) if ood_families is None else list(ood_families)
        if self.family in self.ood_families:
            self.ood_families = [f for f in self.ood_families if f != self.family]
        self.splits = ("train", "test", "ood") if self.ood_families else ("train", "test")
        self.show_applicable = show_applicable
        self.step_limit_factor = step_limit_factor
        self.max_step_limit = max_step_limit
        self.validate_plans = validate_plans
        self.generator = generator
        self.generator_args = (int(seed), int(n_train), int(n_test), int(n_warmup))
        self.length_range = (min_length, max_length)
        if generator is not None:
            from pivotgym_planning.generators import domain

            self.family = domain(generator).folder
            self.ood_families = [f for f in self.ood_families if f != self.family]
            self.splits = ("train", "test", "warmup", "ood") if self.ood_families else ("train", "test", "warmup")
        self.problem: PlanningProblem | None = None
        self.state: frozenset[str] = frozenset()
        self.plan: list[str] = []

    # ---------------------------------------------------------------- tasks
    def load_tasks(self, split: str) -> list[Task]:
        if split in ("train", "test", "warmup") and self.generator is not None:
            return self._generated_tasks(split)
        if split in ("train", "test"):
            items = family_splits(self.family)[split]
        elif split == "ood":
            items = [item for fam in self.ood_families for s in ("train", "test") for item in family_splits(fam)[s]]
        else:
            raise KeyError(split)
        tasks = []
        for folder, filename, entry in items:
            tasks.append(
                Task(
                    id=f"{folder}/{filename.removesuffix('.pddl')}",
                    split=split,
                    data={"folder": folder, "file": filename, "family": folder.removesuffix("_test")},
                    metadata={
                        "optimal_length": entry["length"],
                        "held_out": split == "test" and not folder.endswith("_test"),
                    },
                )
            )
        return tasks

    def _generated_tasks(self, split: str) -> list[Task]:
        from pivotgym_planning.generators import generated_split

        assert self.generator is not None
        seed, n_train, n_test, n_warmup = self.generator_args
        low, high = self.length_range
        tasks = []
        size = {"train": n_train, "test": n_test, "warmup": n_warmup}[split]
        for p in generated_split(self.generator, split, seed, size):  # only this split is generated
            if (low is not None and p.optimal_length < low) or (high is not None and p.optimal_length > high):
                continue
            tasks.append(
                Task(
                    id=p.name,
                    split=split,
                    data={
                        "folder": p.folder,
                        "family": p.folder,
                        "generator": p.domain,
                        "problem_pddl": p.problem_pddl,
                        "expert_plan": list(p.plan),
                    },
                    metadata={
                        "optimal_length": p.optimal_length,
                        "difficulty": p.optimal_length,
                        "canonical": p.canonical,
                        "generator": p.domain,
                        "seed": seed,
                        **p.params,
                        "held_out": False,
                    },
                )
            )
        return tasks

    def problem_for(self, task: Task) -> PlanningProblem:
        if "problem_pddl" in task.data:
            return problem_from_text(task.data["folder"], task.data["problem_pddl"])
        return load_problem(task.data["folder"], task.data["file"])

    # ---------------------------------------------------------------- episode
    def initial_messages(self, task: Task) -> list[Message]:
        problem = self.problem_for(task)
        self.problem = problem
        self.state = problem.init
        self.plan = []
        if not self._fixed_max_turns:
            optimal = int(task.metadata.get("optimal_length") or 10)
            self.max_turns = min(self.max_step_limit, max(10, self.step_limit_factor * optimal))
        return [
            message("system", SYSTEM_PROMPT.format(example=problem.example_action())),
            message("user", self._intro(problem)),
        ]

    def _intro(self, problem: PlanningProblem) -> str:
        by_type: dict[str, list[str]] = {}
        for obj, typ in sorted(problem.objects.items()):
            by_type.setdefault(typ, []).append(obj)
        objects = "; ".join(
            f"{' '.join(objs)} - {typ}" if typ != "object" else " ".join(objs) for typ, objs in by_type.items()
        )
        lines = [
            f"Domain: {problem.domain_name}",
            "Actions: " + "; ".join(f"({s.signature()})" for s in problem.schemas.values()),
            f"Objects: {objects}",
        ]
        statics = problem.describe_statics()
        if statics:
            lines.append(f"Fixed facts: {statics}")
        lines += [f"State: {problem.describe_state(self.state)}", f"Goal: {problem.describe_goal()}"]
        if self.show_applicable:
            lines.append(self._applicable_line())
        lines.append("Your action?")
        return "\n".join(lines)

    def _applicable_line(self) -> str:
        assert self.problem is not None
        return "Applicable: " + " ".join(a.text for a in self.problem.applicable(self.state))

    def apply_action(self, action: str) -> StepOutcome:
        problem = self.problem
        assert problem is not None
        try:
            ground = problem.parse(action, self.state)
            self.state = problem.apply(self.state, ground)
        except ActionError as exc:
            raise InvalidAction(str(exc), code=exc.code) from None
        self.plan.append(ground.text)
        info: dict[str, Any] = {"action": ground.text, "plan_length": len(self.plan)}
        if problem.goal_reached(self.state):
            valid, how = self._validate()
            info.update(goal_reached=True, plan_valid=valid, validator=how)
            verdict = "VAL accepts the plan." if valid else "VAL rejects the plan."
            text = f"Goal reached in {len(self.plan)} steps. {verdict}"
            return StepOutcome([message("user", text)], reward=1.0 if valid else 0.0, terminated=True, info=info)
        lines = [f"OK {ground.text}", f"State: {problem.describe_state(self.state)}"]
        if self.show_applicable:
            lines.append(self._applicable_line())
        return StepOutcome([message("user", "\n".join(lines))], info=info)

    def _validate(self) -> tuple[bool, str]:
        """VAL's judgement of the executed plan (the model's own when VAL is unavailable or disabled)."""
        assert self.problem is not None
        if self.validate_plans:
            try:
                return validate(self.problem.domain_text, self.problem.problem_text, self.plan).valid, "val"
            except ValidatorMissing:
                pass
        return True, "model"

    # ---------------------------------------------------------------- state for verifiers
    def snapshot(self) -> dict[str, Any]:
        base = super().snapshot()
        return {
            **base,
            "state": self.state,
            "plan": list(self.plan),
            "messages": copy.deepcopy(self.messages),
            "turn": self.turn,
            "done": self.done,
            "max_turns": self.max_turns,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.task = self.get_task(snapshot["task_id"])
        self.problem = self.problem_for(self.task)
        self.state = snapshot["state"]
        self.plan = list(snapshot["plan"])
        self._actions = list(snapshot["actions"])
        self.messages = copy.deepcopy(snapshot["messages"])
        self.turn, self.done, self.max_turns = snapshot["turn"], snapshot["done"], snapshot["max_turns"]

    # ---------------------------------------------------------------- probes for `pivotgym check`
    def wrong_action(self, expert_action: str) -> str | None:
        """A legal action in the current state that a correct verifier must not credit: applicable, not
        reaching the goal, and not optimal (h* after it is not h* now minus one). ``None`` when every
        applicable action is optimal or h* is not known exactly (the optional ``wrong_action`` capability
        that ``pivotgym check`` probes verifiers with)."""
        problem = self.problem
        if problem is None or self.done:
            return None
        oracle = _oracle(problem)
        now = oracle(self.state)
        if now is None or math.isinf(now):
            return None
        for action in problem.applicable(self.state):
            after = problem.apply(self.state, action)
            if problem.goal_reached(after):
                continue
            h = oracle(after)
            if h is not None and h != now - 1:
                return action.text
        return None

    # ---------------------------------------------------------------- core hooks: legal actions, progress
    def legal_actions(self) -> list[str] | None:
        """Every applicable ground action in the current state, in canonical PDDL text (``(pick ball1 rooma
        left)``: what the parser accepts and the expert emits), sorted; ``[]`` once the episode is over, None
        before a reset."""
        if self.problem is None:
            return None
        if self.done:
            return []
        return [action.text for action in self.problem.applicable(self.state)]

    def progress(self) -> float | None:
        """``1 - h*(s) / h*(s0)`` clipped to [0, 1], with h* the optimal cost-to-go (the verifier's oracle:
        A*, else the exact table): 1 when the goal holds, 0 at a dead end, None before a reset or when h* is
        not known within the search budget."""
        problem = self.problem
        if problem is None:
            return None
        if problem.goal_reached(self.state):
            return 1.0
        oracle = _oracle(problem)
        now = oracle(self.state)
        if now is None:
            return None
        if math.isinf(now):
            return 0.0
        start = oracle(problem.init)
        if start is None or math.isinf(start):
            return None
        if start == 0:
            return 1.0
        return min(1.0, max(0.0, 1.0 - now / start))

    # ---------------------------------------------------------------- calibration (`pivotgym calibrate`)
    def continuation_actions(self) -> list[str] | None:
        """An optimal plan from the current state (``[]`` at the goal or at a dead end, where nothing can
        complete the task), or None when h* is unknown there (the search ran out of budget): ``pivotgym
        calibrate --continuation optimal`` plays candidate actions out with it. Each step takes an applicable
        action that lowers h* by one."""
        problem = self.problem
        if problem is None:
            return None
        oracle = _oracle(problem)  # h*, cached per problem: each step descends it by one
        task = oracle.task
        state, plan = task.project(self.state), []
        now = oracle(state)
        while now != 0:
            if now is None:
                return None
            if math.isinf(now):  # a dead end: nothing completes the task from here
                return []
            for op, after in task.successors(state):
                if oracle(after) == now - 1:
                    state, now = after, now - 1
                    plan.append(op.name)
                    break
            else:
                return None
        return plan

    def calibration_candidates(self, expert_action: str) -> list[str]:
        """Every applicable action in the current state: the candidates `pivotgym calibrate` judges here
        without a model, so other optimal actions (equivalent to the expert's) and wrong ones are both seen."""
        if self.problem is None or self.done:
            return []
        return [action.text for action in self.problem.applicable(self.state)]

    # ---------------------------------------------------------------- expert
    def expert_actions(self, task: Task) -> list[Message] | None:
        if "expert_plan" in task.data:  # generated: the optimal plan found when the problem was generated
            return [message("assistant", step) for step in task.data["expert_plan"]]
        found = solve(self.problem_for(task))
        if found is None:
            return None
        plan, _method = found
        return [message("assistant", step) for step in plan]
