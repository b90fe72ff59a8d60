"""The catalog: which reasoning-gym generators become envs, at which difficulty levels, read how.

Each :class:`ReasoningTask` names a reasoning-gym dataset, its candidate difficulty levels (the generator's
own config keywords, easiest first, each with the generation length its answers need), the level frozen for
the env (chosen by :mod:`pivotgym_reasoning.calibrate` on the base model; see the README's table), how the
answer is read (:mod:`pivotgym_reasoning.parsing`), how a worked example's answer is written, and the
trivial strategy the chance floor is computed from (:func:`echo_answer`).

Splits are generated, never stored: reasoning-gym makes item ``i`` of a dataset seeded ``s`` from
``random.Random(s + i)``, so the splits use seeds a million apart (:data:`SEEDS`; no split has a million
items) and the train split also drops every item whose question text is in the test split.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CALIBRATION_SIZE",
    "SEEDS",
    "TASKS",
    "TEST_SIZE",
    "TRAIN_SIZE",
    "Level",
    "ReasoningTask",
    "echo_answer",
    "env_id",
]

#: the base seed of each split (and of the worked examples and the calibration items); a million apart
SEEDS: Mapping[str, int] = {"test": 1_000_000, "train": 2_000_000, "shots": 3_000_000, "calibration": 4_000_000}
#: items in each env's test split (the suite's n per task)
TEST_SIZE = 200
#: items in each env's train split (at most: duplicates and questions that are also test questions are dropped)
TRAIN_SIZE = 1000
#: items the chance floor of a level is computed on (no model involved; cheap)
CALIBRATION_SIZE = 1000


@dataclass(frozen=True)
class Level:
    """One difficulty: the generator's config keywords and the new tokens an answer at it needs."""

    config: Mapping[str, Any]
    max_new_tokens: int


def _expression_reply(entry: Mapping[str, Any]) -> str:
    """A worked arithmetic example's answer: the expression, ``=``, the result (``5 - 3 = 2``)."""
    expression = str(entry["question"]).removeprefix("Calculate").strip().rstrip(".").strip()
    return f"{expression} = {entry['answer']}"


def _sum_reply(entry: Mapping[str, Any]) -> str:
    """A worked chain-sum example's answer: the sum after the question's colon, then its result
    (``98 + 93 = 191``), the form the base model writes on its own."""
    expression = str(entry["question"]).rsplit(":", 1)[-1].strip()
    return f"{expression} {entry['answer']}"


def _gold_reply(entry: Mapping[str, Any]) -> str:
    return str(entry["answer"])


def _whole_question(entry: Mapping[str, Any]) -> str:
    return str(entry["question"]).strip()


def _first_line(entry: Mapping[str, Any]) -> str:
    """A worked example's question without the generator's instructions after its first line (the task's own
    question keeps them; repeating them in both examples would triple a long prompt)."""
    return str(entry["question"]).strip().splitlines()[0]


def _last_line(entry: Mapping[str, Any]) -> str:
    """A worked example's question without the generator's preamble before its last line."""
    return str(entry["question"]).strip().splitlines()[-1]


_LAST_INTEGER = re.compile(r"-?\d+")


def echo_answer(task: str, entry: Mapping[str, Any]) -> str | None:
    """The answer of a model that only copies from the question - the input list unchanged for sorting and
    reversal, the word itself for spelling backward, the question's last integer for counting and
    arithmetic (None when it has none). Scored by the task's own scorer, it is one of the chance floors."""
    meta = entry.get("metadata") or {}
    if task == "number_sorting":
        return "[" + ", ".join(f"'{n}'" for n in meta["original_numbers"]) + "]"
    if task == "word_sequence_reversal":
        return ", ".join(meta["words"])
    if task == "spell_backward":
        return str(meta["word"])
    found = _LAST_INTEGER.findall(str(entry["question"]))
    return found[-1] if found else None


@dataclass(frozen=True)
class ReasoningTask:
    """One env's generator, levels and answer form (see the module docstring)."""

    dataset: str
    kind: str
    levels: Mapping[str, Level]
    level: str
    description: str
    shot_reply: Callable[[Mapping[str, Any]], str] = _gold_reply
    shot_question: Callable[[Mapping[str, Any]], str] = _whole_question
    #: the user message of an item (default: the generator's whole question)
    question: Callable[[Mapping[str, Any]], str] = _whole_question
    base_config: Mapping[str, Any] = field(default_factory=dict)
    #: whether the env is a member of the ``ood-reasoning`` suite (its frozen level passed calibration)
    in_suite: bool = True

    def config(self, level: str | None = None) -> dict[str, Any]:
        """The generator's keywords at ``level`` (default: the frozen one)."""
        return {**self.base_config, **self.levels[level or self.level].config}


def env_id(name: str) -> str:
    """``reasoning/<name with hyphens>-v0`` of a catalog name."""
    return f"reasoning/{name.replace('_', '-')}-v0"


_ARITHMETIC = {"operators": ("+", "-"), "allow_parentheses": False, "allow_negation": False}
_SORTING = {"min_decimals": 0, "max_decimals": 0, "min_value": 0, "max_value": 99}

#: catalog name -> task. The frozen ``level`` and ``in_suite`` of each come from the calibration on
#: smollm2-135m in the README: the three sums have a level in the band; the other tasks have none (the base
#: model is at or below their chance floor at their easiest level), so they stay envs but not suite members
TASKS: Mapping[str, ReasoningTask] = {
    "basic_arithmetic": ReasoningTask(
        dataset="basic_arithmetic",
        kind="integer",
        levels={
            "2x1digit": Level({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, 12),
            "3x1digit": Level({"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1}, 16),
            "2x2digit": Level({"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}, 16),
        },
        level="2x1digit",
        description="integer addition and subtraction",
        shot_reply=_expression_reply,
        base_config=_ARITHMETIC,
    ),
    "chain_sum": ReasoningTask(
        dataset="chain_sum",
        kind="integer",
        levels={
            # 16 tokens: the base model restates the sum before its result ("1 + 6 + 3 = 10"); at 8 it was cut
            # off before the result (3% accuracy, 25% parsed)
            "2x1to2digit": Level({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}, 16),
            "3x1digit": Level({"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1}, 16),
            "2x2digit": Level({"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}, 16),
        },
        level="2x1to2digit",
        description="a chain of additions and subtractions, answered after its '='",
        shot_reply=_sum_reply,
        base_config={"allow_negation": False},
    ),
    "decimal_chain_sum": ReasoningTask(
        dataset="decimal_chain_sum",
        kind="number",
        levels={
            "2x1digit-1dp": Level(
                {
                    "min_terms": 2,
                    "max_terms": 2,
                    "min_digits": 1,
                    "max_digits": 1,
                    "min_decimal_places": 1,
                    "max_decimal_places": 1,
                },
                16,
            ),
            "3x1digit-1dp": Level(
                {
                    "min_terms": 3,
                    "max_terms": 3,
                    "min_digits": 1,
                    "max_digits": 1,
                    "min_decimal_places": 1,
                    "max_decimal_places": 1,
                },
                20,
            ),
        },
        level="2x1digit-1dp",
        description="additions and subtractions of one-decimal numbers, answered after the '='",
        base_config={"allow_negation": False},
    ),
    "leg_counting": ReasoningTask(
        dataset="leg_counting",
        kind="integer",
        levels={
            "1animal-1to6": Level({"min_animals": 1, "max_animals": 1, "min_instances": 1, "max_instances": 6}, 8),
            "1animal-1to10": Level({"min_animals": 1, "max_animals": 1, "min_instances": 1, "max_instances": 10}, 8),
            "2animals-1to3": Level({"min_animals": 2, "max_animals": 2, "min_instances": 1, "max_instances": 3}, 8),
        },
        level="1animal-1to6",
        description="total legs of a list of animals",
        shot_question=_last_line,
        in_suite=False,  # no level in the band on the base model (README)
    ),
    "letter_counting": ReasoningTask(
        dataset="letter_counting",
        kind="integer",
        levels={
            "3to5words": Level({"min_words": 3, "max_words": 5}, 8),
            "6to10words": Level({"min_words": 6, "max_words": 10}, 8),
            "11to15words": Level({"min_words": 11, "max_words": 15}, 8),
        },
        level="3to5words",
        description="how often a letter occurs in a text",
        in_suite=False,  # no level in the band on the base model (README)
    ),
    "number_sorting": ReasoningTask(
        dataset="number_sorting",
        kind="number_list",
        levels={
            "3numbers": Level({"min_numbers": 3, "max_numbers": 3}, 24),
            "4to5numbers": Level({"min_numbers": 4, "max_numbers": 5}, 36),
            "6to8numbers": Level({"min_numbers": 6, "max_numbers": 8}, 52),
        },
        level="3numbers",
        description="sort integers ascending or descending",
        # the generator's two lines of list-format instructions made the base model repeat them (0 of 40
        # parsed at 3 numbers); the worked examples show the format instead
        shot_question=_first_line,
        question=_first_line,
        base_config=_SORTING,
        in_suite=False,  # no level in the band on the base model (README)
    ),
    "spell_backward": ReasoningTask(
        dataset="spell_backward",
        kind="word",
        levels={
            "3letters": Level({"min_word_len": 3, "max_word_len": 3}, 10),
            "4to5letters": Level({"min_word_len": 4, "max_word_len": 5}, 12),
            "6to8letters": Level({"min_word_len": 6, "max_word_len": 8}, 16),
        },
        level="3letters",
        description="spell a word backward",
        in_suite=False,  # no level in the band on the base model (README)
    ),
    "word_sequence_reversal": ReasoningTask(
        dataset="word_sequence_reversal",
        kind="words",
        levels={
            "2words": Level({"min_words": 2, "max_words": 2}, 12),
            "3to4words": Level({"min_words": 3, "max_words": 4}, 16),
            "5to7words": Level({"min_words": 5, "max_words": 7}, 28),
        },
        level="2words",
        description="reverse a list of words",
        shot_question=_last_line,
        in_suite=False,  # no level in the band on the base model (README)
    ),
}
