"""The env: one reasoning-gym question per episode, answered once in the chat format.

:class:`ReasoningEnv` is a :class:`~pivotgym.declarative.DeclarativeEnv` whose rows are generated instead of
read from a file, so the suite machinery scores it as it scores the YAML envs (one greedy reply, judged by
the env's scorer, with a parse rate: :mod:`pivotgym.eval.scoring`). The prompt is the generator's own
question after a system prompt with two worked examples at the same difficulty (generated from their own
seed, never a split's item), which shows a small model the answer form. A reply is read by the task's
reader (:mod:`pivotgym_reasoning.parsing`); a reply with nothing to read is an invalid action (no answer,
one more try in an episode, 0 in evaluation); a read answer is scored by the generator's ``score_answer``
and earns 1 only when that score is 1 (several scorers give partial credit; the score is in the details).
"""

from __future__ import annotations

import re
from typing import Any

from pivotgym import DeclarativeEnv, EnvConfig, InvalidAction
from pivotgym.errors import ConfigError
from pivotgym.parsing import normalize_answer
from pivotgym.types import Task
from pivotgym_reasoning.parsing import parse_answer
from pivotgym_reasoning.tasks import SEEDS, TASKS, TEST_SIZE, TRAIN_SIZE, ReasoningTask, env_id

__all__ = ["ReasoningEnv", "generate_entries"]

SYSTEM = "Answer with the final answer only, in the form the examples show."
#: a reply longer than this is no answer (the answers are a few dozen characters; bounds what parsing reads)
MAX_REPLY_CHARS = 4000
#: control characters (tab, newline and carriage return allowed): such a reply is malformed, never an answer
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: how many generator indices a split may try per item it needs before giving up on unique questions
_TRIES_PER_ITEM = 50
#: a split also stops after this many repeated questions in a row (its question space is used up)
_MAX_REPEATS = 2000


def generate_entries(
    spec: ReasoningTask, level: str, seed: int, size: int, exclude: frozenset[str] = frozenset(), unique: bool = True
) -> list[dict[str, Any]]:
    """``size`` items of ``spec``'s generator at ``level`` from ``seed``: item ``i`` is the generator's item
    for seed ``seed`` and index ``i``, in index order; with ``unique``, a question already taken or in
    ``exclude`` (normalised text) is skipped. May return fewer items when the question space runs out (after
    ``size`` x 50 indices, or 2,000 repeats in a row)."""
    import reasoning_gym

    config = spec.config(level)
    budget = size * _TRIES_PER_ITEM if unique else size
    dataset = reasoning_gym.create_dataset(spec.dataset, seed=seed, size=budget, **config)
    seen = set(exclude)
    out: list[dict[str, Any]] = []
    repeats = 0
    for index in range(budget):
        entry = dict(dataset[index])
        key = normalize_answer(str(entry["question"]))
        if unique and key in seen:
            repeats += 1
            if repeats >= _MAX_REPEATS:
                break
            continue
        repeats = 0
        seen.add(key)
        out.append({**entry, "index": index})
        if len(out) == size:
            break
    return out


class ReasoningEnv(DeclarativeEnv):
    """A reasoning-gym generator as a single-turn env (see the module docstring).

    ``task`` is a catalog name (:data:`~pivotgym_reasoning.tasks.TASKS`, kept as :attr:`reasoning_task`; not
    ``spec``, which is gymnasium's registration record); ``level`` overrides the frozen difficulty
    (calibration uses it); ``test_size`` and ``train_size`` size the splits."""

    max_action_chars = MAX_REPLY_CHARS

    def __init__(
        self,
        task: str,
        *,
        level: str | None = None,
        test_size: int = TEST_SIZE,
        train_size: int = TRAIN_SIZE,
        **kwargs: Any,
    ) -> None:
        if task not in TASKS:
            raise ConfigError(f"unknown reasoning task {task!r}; the catalog has {sorted(TASKS)}")
        self.reasoning_task = TASKS[task]
        self.task_name = task
        self.level = level or self.reasoning_task.level
        if self.level not in self.reasoning_task.levels:
            raise ConfigError(
                f"{env_id(task)}: unknown level {self.level!r}; levels are {list(self.reasoning_task.levels)}"
            )
        spec = self.reasoning_task
        self.sizes = {"test": int(test_size), "train": int(train_size)}
        self._scorer: Any = None
        shots = [
            {"input": self.reasoning_task.shot_question(e), "reply": self.reasoning_task.shot_reply(e)}
            for e in generate_entries(self.reasoning_task, self.level, SEEDS["shots"], 2)
        ]
        config = EnvConfig(
            id=env_id(task),
            source={"type": "inline", "examples": []},
            prompt={"system": SYSTEM, "template": "{input}", "shots": shots},
            answer={"type": "text"},
            splits={"train": {}, "test": {}},
            description=f"reasoning-gym {spec.dataset} ({self.level}): {spec.description}",
            max_new_tokens=self.reasoning_task.levels[self.level].max_new_tokens,
        )
        super().__init__(config=config, **kwargs)

    # ---- tasks
    def load_tasks(self, split: str) -> list[Task]:
        """The split's items: ``test`` has :data:`TEST_SIZE` unique questions; ``train`` up to
        :data:`TRAIN_SIZE` unique questions, none of them a test question."""
        if split not in self.sizes:
            raise KeyError(f"{self.env_id}: unknown split {split!r}; splits are {list(self.sizes)}")
        exclude: frozenset[str] = frozenset()
        if split == "train":
            exclude = frozenset(normalize_answer(str(t.data["input"])) for t in self.tasks("test"))
        entries = generate_entries(self.reasoning_task, self.level, SEEDS[split], self.sizes[split], exclude)
        if split == "test" and len(entries) < self.sizes[split]:
            raise ConfigError(
                f"{self.env_id} at level {self.level!r} has only {len(entries)} distinct questions; "
                f"its test split needs {self.sizes[split]}: choose a harder level or a smaller test_size"
            )
        return [self._task(split, entry) for entry in entries]

    def _task(self, split: str, entry: dict[str, Any]) -> Task:
        task_id = f"{split}-{entry['index']:06d}"
        data = {
            "id": task_id,
            "input": self.reasoning_task.question(entry),
            "target": [str(entry["answer"])],
            "entry": {k: entry[k] for k in ("question", "answer", "metadata")},
            "level": self.level,
        }
        return Task(id=task_id, split=split, data=data)

    def rows(self) -> list[dict[str, Any]]:
        """Every item of every split (the YAML envs' row view; this env generates its splits)."""
        return [dict(t.data) for split in self.sizes for t in self.tasks(split)]

    # ---- scoring
    def scorer(self) -> Any:
        """The generator's dataset object, for its ``score_answer`` (built once)."""
        if self._scorer is None:
            import reasoning_gym

            self._scorer = reasoning_gym.create_dataset(
                self.reasoning_task.dataset, seed=SEEDS["test"], size=1, **self.reasoning_task.config(self.level)
            )
        return self._scorer

    def read_answer(self, reply: str) -> str | None:
        """The answer in ``reply`` as the scorer takes it, or None when none can be read."""
        return parse_answer(self.reasoning_task.kind, reply)

    def score(self, task: Task, answer: str) -> float:
        """reasoning-gym's own score of ``answer`` on ``task`` (in [0, 1]; some scorers give partial credit)."""
        return float(self.scorer().score_answer(answer, task.data["entry"]))

    def judge(self, task: Task, reply: str) -> tuple[float, dict[str, Any]]:
        """(1 if the scorer gives the read answer full marks else 0, details); never raises on any string."""
        problem = self.too_long(reply)
        if problem is None and _CONTROL.search(reply):
            problem = "malformed: control characters"  # what check_reply refuses; a verifier calls judge alone
        if problem is None:
            try:
                reply.encode("utf-8")
            except UnicodeEncodeError:
                problem = "not valid Unicode (lone surrogate code points)"
        if problem is not None:
            return 0.0, {"error": problem}
        answer = self.read_answer(reply)
        if answer is None:
            return 0.0, {"error": "no_answer", "answer": None}
        try:
            score = self.score(task, answer)
        except Exception as exc:
            return 0.0, {"answer": answer[:200], "error": f"scorer_error: {exc!r}"[:300]}
        return float(score >= 1.0), {"answer": answer[:200], "score": round(score, 4)}

    def wrong_action(self, expert_text: str) -> str | None:
        """A legal but wrong answer at the current task (``pivotgym check``'s probe that the verifier does not
        credit whatever parses): the gold number plus one, the word with a letter more, the list rotated or
        reversed; None when the gold answer has no such variant."""
        answer = self.read_answer(expert_text)
        return _wrong_answer(self.reasoning_task.kind, answer) if answer is not None else None

    def check_reply(self, task: Task, reply: str) -> None:
        """Raise :class:`InvalidAction` for a reply with no answer of the task's kind in it."""
        problem = self.too_long(reply)
        if problem is not None:
            raise InvalidAction(problem, code="action_too_long")
        super().check_reply(task, reply)
        if self.read_answer(reply) is None:
            raise InvalidAction(
                "No answer found in the reply; give the final answer only, in the form the examples show.",
                code="no_answer",
            )


def _wrong_answer(kind: str, gold: str) -> str | None:
    """A readable answer of ``kind`` that differs from ``gold`` in substance, or None."""
    import json
    from decimal import Decimal, InvalidOperation

    if kind in ("integer", "number"):
        try:
            return str(Decimal(gold) + 1)
        except InvalidOperation:
            return None
    if kind == "word":
        return gold + gold[-1] if gold else None
    if kind == "words":
        items = [w.strip() for w in gold.split(",")]
        rotated = items[1:] + items[:1]
        return ", ".join(rotated) if rotated != items else None
    items = json.loads(gold.replace("'", '"'))
    return json.dumps(items[::-1]) if items[::-1] != items else None
