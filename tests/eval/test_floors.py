"""Floors of turn accuracy (pivotgym.eval.floors) on a toy env whose legal and optimal actions are known by hand."""

from __future__ import annotations

import math
import re
import types
from collections.abc import Iterator

import pytest

import pivotgym
from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task, Verdict
from pivotgym.types import message

ENV_ID = "floors-toy/climb-v0"
FLAKY_ID = "floors-toy/flaky-v0"
CANDIDATE_ID = "floors-toy/candidates-v0"


def optimal(left: int, k: int) -> bool:
    """Whether `add k` stays on a shortest path to the target from ``left`` away (steps of at most 3)."""
    return k <= left and math.ceil((left - k) / 3) == math.ceil(left / 3) - 1


class ClimbEnv(AgentEnv):
    """Reach a target with `add K`, K in 1..3 (an overshoot ends the episode unrewarded). Every `add K` is legal;
    the target-7 task cannot enumerate its actions (legal_actions is None there)."""

    splits = ("train", "test")
    max_turns = 8
    targets = {"test": [4, 5, 3, 7], "train": [6]}

    def load_tasks(self, split):
        return [Task(f"{split}-t{t}", split, {"target": t}) for t in self.targets[split]]

    def initial_messages(self, task):
        self.value = 0
        return [message("user", f"Reach {task.data['target']} with `add K`, K in 1..3.")]

    def apply_action(self, action):
        m = re.fullmatch(r"\s*add\s+([123])\s*", action)
        if not m:
            raise InvalidAction("write `add K` with K in 1..3")
        self.value += int(m.group(1))
        done = self.value >= self.task.data["target"]
        reward = float(self.value == self.task.data["target"])
        return StepOutcome([message("user", f"value={self.value}")], reward=reward if done else 0.0, terminated=done)

    def legal_actions(self):
        if self.task.data["target"] == 7:
            return None
        return ["add 1", "add 2", "add 3", "add 1"]  # a duplicate the floors must count once

    def expert_actions(self, task):
        left, out = task.data["target"], []
        while left:
            out.append(message("assistant", f"add {min(3, left)}"))
            left -= min(3, left)
        return out


class ClimbVerifier:
    """Functional: credits any `add K` that keeps a shortest path to the target, from the state itself."""

    name = "floors-toy/optimal"
    version = "1"

    def verify(self, context, candidate):
        m = re.fullmatch(r"\s*add\s+([123])\s*", candidate)
        if not m:
            return Verdict.fail("unparseable")
        env = context.env()
        left = env.task.data["target"] - env.value
        ok = optimal(left, int(m.group(1)))
        return Verdict(float(ok), ok, "optimal" if ok else "not_optimal")


class FlakyVerifier(ClimbVerifier):
    """ClimbVerifier that cannot decide `add 2` at the start of the target-5 task."""

    name = "floors-toy/flaky"

    def verify(self, context, candidate):
        env = context.env()
        if env.task.data["target"] == 5 and env.value == 0 and candidate.strip() == "add 2":
            return Verdict.undecided_because("solver gave up: budget")
        return super().verify(context, candidate)


class CandidateClimbEnv(ClimbEnv):
    """ClimbEnv without a finite legal set (as if K were open): it offers the task's own expert actions instead."""

    candidate_description = "an action of the task's own expert trajectory"

    def legal_actions(self):
        return None

    def candidate_actions(self):
        return [m["content"] for m in self.expert_actions(self.active_task)]


def _plugin() -> types.ModuleType:
    mod = types.ModuleType("floors_toy_plugin")
    mod.register_environments = pivotgym.hookimpl(
        lambda register: (
            register(ENV_ID, ClimbEnv, verifier=ClimbVerifier.name),
            register(FLAKY_ID, ClimbEnv, verifier=FlakyVerifier.name),
            register(CANDIDATE_ID, CandidateClimbEnv, verifier=ClimbVerifier.name),
        )
    )
    mod.register_verifiers = pivotgym.hookimpl(
        lambda register: (register(ClimbVerifier.name, ClimbVerifier), register(FlakyVerifier.name, FlakyVerifier))
    )
    return mod


@pytest.fixture()
def toy_registry() -> Iterator[object]:
    """The process registry: the builtins plus the toy env (verifications run in-process: serial executor)."""
    from pivotgym.plugins import PluginManager
    from pivotgym.registry import Registry, reset_registry

    pm = PluginManager()
    pm.load_builtins()
    pm.add(_plugin(), "floors-toy")
    registry = Registry.from_plugins(pm)
    reset_registry(registry)
    yield registry
    reset_registry()


def test_floors_count_legal_and_credited_actions_per_state_and_average_per_problem(toy_registry):
    from pivotgym.eval.floors import floors

    result = floors(ENV_ID, "test", executor="serial", progress=False)
    judged = [s for s in result.states if s.judged]
    # target 4: left 4 (all three optimal), left 1 (add 1); target 5: left 5 (add 2, add 3), left 2 (add 2);
    # target 3: left 3 (add 3); target 7: three states without legal actions
    assert [(s.task_id, s.n_legal, s.n_credited) for s in judged] == [
        ("test-t4", 3, 3),
        ("test-t4", 3, 1),
        ("test-t5", 3, 2),
        ("test-t5", 3, 1),
        ("test-t3", 3, 1),
    ]
    assert all(s.expert_credited for s in judged)
    assert judged[2].credited == [False, True, True]
    assert result.no_legal == 3 and result.failed == 0 and len(result.states) == 8
    assert result.task_ids == ["test-t4", "test-t5", "test-t3"]
    assert result.per_task["random_legal"] == pytest.approx([2 / 3, 1 / 2, 1 / 3])
    assert result.random_legal == pytest.approx(0.5)
    assert result.expert == 1.0
    assert result.per_task["multi_credit"] == [0.5, 0.5, 0.0]
    assert result.multi_credit == pytest.approx(1 / 3)
    assert result.per_task["legal"] == [3.0, 3.0, 3.0]
    assert result.per_task["credited"] == pytest.approx([2.0, 1.5, 1.0])
    assert result.per_item("random_legal")["test-t5"] == pytest.approx(0.5)


def test_floors_judge_the_candidate_actions_of_an_env_without_legal_ones_and_say_so(toy_registry, capsys):
    from pivotgym.cli import main
    from pivotgym.eval.floors import floors

    result = floors(CANDIDATE_ID, "test", executor="serial", progress=False)
    # candidates = the expert's distinct actions: t4 {add 3, add 1}: left 4 both credited, left 1 add 1 only;
    # t5 {add 3, add 2}: left 5 both, left 2 add 2; t3 {add 3}; t7 {add 3, add 1}: left 7 both, 4 both, 1 add 1
    assert result.no_legal == 0 and result.judged == 8
    assert result.action_set == "candidate" and {s.action_set for s in result.states} == {"candidate"}
    assert result.per_task["random_legal"] == pytest.approx([0.75, 0.75, 1.0, 5 / 6])
    assert result.per_task["multi_credit"] == pytest.approx([0.5, 0.5, 0.0, 2 / 3])
    out = result.to_dict()
    assert out["action_set_description"] == "an action of the task's own expert trajectory"
    # an env with legal actions keeps them (and no description)
    legal = floors(ENV_ID, "test", executor="serial", progress=False)
    assert legal.action_set == "legal" and legal.action_set_description == "" and legal.no_legal == 3
    assert main(["floors", CANDIDATE_ID, "--executor", "serial"]) == 0
    printed = capsys.readouterr().out
    assert "random candidate action (floor)" in printed and "random legal action" not in printed
    assert "candidate actions (no finite legal set): an action of the task's own expert trajectory" in printed


def test_floors_leave_out_a_state_with_an_undecided_verification_and_count_it(toy_registry):
    from pivotgym.eval.floors import floors

    result = floors(FLAKY_ID, "test", executor="serial", progress=False)
    assert result.failed == 1
    bad = next(s for s in result.states if s.failed)
    assert (bad.task_id, bad.turn) == ("test-t5", 0) and bad.failed_reasons == ["solver gave up: budget"]
    assert not bad.judged
    # the target-5 problem keeps its one decided state (left 2: add 2 only)
    assert result.per_item("random_legal")["test-t5"] == pytest.approx(1 / 3)
    assert result.judged == 4


def test_floors_with_an_expert_the_verifier_refuses_lower_the_ceiling(toy_registry):
    """A trajectory whose 'expert' takes a non-optimal step: the ceiling is the share of states it is credited."""
    from pivotgym.eval.floors import floors
    from pivotgym.registry import make
    from pivotgym.types import Trajectory

    env = make(ENV_ID)
    task = env.get_task("test-t4")
    detour = env.goto(task.id, ["add 1", "add 1", "add 2"])
    slow = Trajectory(id="slow", env_id=ENV_ID, task_id=task.id, messages=list(detour), reward=1.0)
    result = floors(env, "test", trajectories=[slow], executor="serial", progress=False)
    # left 4: add 1 is optimal (two steps either way); left 3: add 1 is not; left 2: add 2 is
    assert [s.expert_credited for s in result.states] == [True, False, True]
    assert result.expert == pytest.approx(2 / 3)
    assert [s.n_credited for s in result.states] == [3, 1, 1]


def test_floors_to_dict_carries_intervals_over_problems_and_limit_takes_the_first_trajectories(toy_registry):
    import json

    from pivotgym.eval.floors import METRICS, floors

    result = floors(ENV_ID, "test", limit=2, executor="serial", progress=False)
    assert result.task_ids == ["test-t4", "test-t5"]
    out = result.to_dict(states=True)
    json.dumps(out)  # strict JSON: no NaN
    assert set(out["metrics"]) == set(METRICS)
    rl = out["metrics"]["random_legal"]
    assert rl["n"] == 2 and rl["mean"] == pytest.approx(7 / 12) and rl["low"] < rl["mean"] < rl["high"]
    assert len(out["state_rows"]) == 4 and out["state_rows"][0]["legal"] == ["add 1", "add 2", "add 3"]


def test_floors_command_prints_each_metric_with_its_interval_and_exits_1_without_judged_states(toy_registry, capsys):
    import json

    from pivotgym.cli import main

    assert main(["floors", ENV_ID, "--executor", "serial"]) == 0
    out = capsys.readouterr().out
    assert f"{ENV_ID} [test]: 3 problems, 5 of 8 states judged (3 without legal actions" in out
    line = next(row for row in out.splitlines() if row.startswith("random legal action (floor)"))
    assert "50.0%" in line and "[" in line and line.rstrip().endswith("3")
    assert main(["floors", ENV_ID, "--executor", "serial", "--limit", "1", "--json", "--states"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["task_ids"] == ["test-t4"] and len(data["state_rows"]) == 2
    assert data["metrics"]["random_legal"]["mean"] == pytest.approx(2 / 3)
    # target 7 comes last in the split: with only it, no state has legal actions
    assert main(["floors", ENV_ID, "--executor", "serial", "--split", "train", "--interval", "bca"]) == 0
    capsys.readouterr()
    ClimbEnv.targets["none"] = [7]
    ClimbEnv.splits = ("train", "test", "none")
    try:
        assert main(["floors", ENV_ID, "--executor", "serial", "--split", "none"]) == 1
        err = capsys.readouterr().err
        assert "FAILED: no state could be judged" in err and "floors-toy/climb-v0: its env (ClimbEnv)" in err
        assert "implement `legal_actions()`" in err and "`candidate_actions()`" in err
    finally:
        ClimbEnv.splits = ("train", "test")
        del ClimbEnv.targets["none"]
    assert main(["floors", "floors-toy/nope-v0"]) == 1
    assert "nope" in capsys.readouterr().err


def test_floors_command_with_a_model_adds_the_likelihood_rows(toy_registry, tiny_model_dir, capsys):
    from pivotgym.cli import main

    args = ["floors", ENV_ID, "--executor", "serial", "--limit", "1", "--model", str(tiny_model_dir), "--device", "cpu"]
    assert main(args) == 0
    out = capsys.readouterr().out
    for label in ("P(credited action)", "P(legal action)", "P(credited | legal)"):
        assert label in out
    assert "tokenised by the chat template 6, as plain text 0; 0 over the generation cap" in out
