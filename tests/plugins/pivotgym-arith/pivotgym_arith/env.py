"""ArithChainEnv and its functional verifier."""

from __future__ import annotations

import ast
import operator
import random
from fractions import Fraction

from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task, Verdict
from pivotgym.types import message

OPS = {"add": ("Add", operator.add), "sub": ("Subtract", operator.sub), "mul": ("Multiply by", operator.mul)}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(text: str) -> Fraction:
    """Exact value of an arithmetic expression (numbers, + - * /, parentheses); ValueError otherwise."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {text[:40]!r}") from exc

    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            return _BIN[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"unsupported syntax {type(node).__name__}")

    try:
        return ev(tree)
    except ZeroDivisionError as exc:
        raise ValueError("division by zero") from exc


class ArithChainEnv(AgentEnv):
    splits = ("train", "test")
    max_turns = 8

    def load_tasks(self, split):
        seeds = range(20) if split == "train" else range(100, 110)
        tasks = []
        for s in seeds:
            rng = random.Random(s)
            ops = [(rng.choice(sorted(OPS)), rng.randint(1, 9)) for _ in range(rng.randint(2, 4))]
            tasks.append(Task(id=f"{split}-{s}", split=split, data={"start": rng.randint(1, 20), "ops": ops}))
        return tasks

    def _instruction(self):
        name, k = self.task.data["ops"][self.step_index]
        return f"{OPS[name][0]} {k}. What is the result?"

    def initial_messages(self, task):
        self.value = Fraction(task.data["start"])
        self.step_index = 0
        return [
            message("system", "Answer each instruction with the resulting number (an expression is fine)."),
            message("user", f"Start with {task.data['start']}. {self._instruction()}"),
        ]

    def apply_action(self, action):
        try:
            got = evaluate(action)
        except ValueError as exc:
            raise InvalidAction(f"{exc}. Reply with a number such as 42.") from None
        name, k = self.task.data["ops"][self.step_index]
        expected = OPS[name][1](self.value, k)
        if got != expected:
            return StepOutcome([message("user", "That is not correct. Try again.")], info={"correct": False})
        self.value = expected
        self.step_index += 1
        if self.step_index == len(self.task.data["ops"]):
            return StepOutcome([message("user", "Correct. Done.")], reward=1.0, terminated=True)
        return StepOutcome([message("user", f"Correct. {self._instruction()}")], info={"correct": True})

    def progress(self):
        """The share of the chain's instructions answered correctly so far (the optional progress hook)."""
        return self.step_index / len(self.task.data["ops"])

    def snapshot(self):
        return {
            "base": super().snapshot(),
            "value": self.value,
            "step_index": self.step_index,
            "messages": list(self.messages),
            "turn": self.turn,
            "done": self.done,
        }

    def restore(self, snap):
        self.task = self.get_task(snap["base"]["task_id"])
        self._actions = list(snap["base"]["actions"])
        self.value, self.step_index = snap["value"], snap["step_index"]
        self.messages, self.turn, self.done = list(snap["messages"]), snap["turn"], snap["done"]

    def expert_actions(self, task):
        value, out = Fraction(task.data["start"]), []
        for name, k in task.data["ops"]:
            value = OPS[name][1](value, k)
            out.append(message("assistant", str(value)))
        return out


class ValueVerifier:
    """Functional: any expression whose value equals the expert answer's value, from that state."""

    name = "arith/value"
    version = "1"

    def verify(self, context, candidate):
        expected = evaluate(context.expert_text)
        try:
            got = evaluate(candidate)
        except ValueError as exc:
            return Verdict.fail(f"unparseable: {exc}", parse=False)
        if context.known_task() is None:  # an ad-hoc turn (no task to step from): the value alone decides
            same = got == expected
            return Verdict(float(same), same, "same_value" if same else "different_value", {"value": str(got)})
        env = context.env()
        _obs, _r, _term, _trunc, info = env.step(candidate)
        if got == expected and info.get("correct", True) and "error" not in info:
            return Verdict.ok("same_value", parse=True, value=str(got))
        return Verdict.fail("different_value", parse=True, value=str(got), expected=str(expected))
