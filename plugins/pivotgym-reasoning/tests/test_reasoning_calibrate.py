"""The calibration's choice rule and chance floors (no model: the floors are the scorers' own verdicts on
trivial answers), and the calibration loop on a scripted sampler."""

from __future__ import annotations

import pytest
from pivotgym_reasoning.calibrate import calibrate, chance_floor, choose_level, format_table, usable
from pivotgym_reasoning.tasks import TASKS

from pivotgym.types import Completion


def _row(level: str, accuracy: float, chance: float) -> dict:
    return {
        "task": "t",
        "level": level,
        "n": 40,
        "accuracy": accuracy,
        "parse_rate": 1.0,
        "chance": chance,
        "constant": chance,
        "echo": 0.0,
    }


def test_the_easiest_level_inside_the_band_is_chosen():
    rows = [_row("easy", 0.95, 0.1), _row("mid", 0.6, 0.1), _row("hard", 0.3, 0.1)]
    assert choose_level(rows) == "mid"  # easy is at ceiling; mid is the first in [chance + 0.15, 0.85]
    assert choose_level([_row("a", 0.3, 0.2), _row("b", 0.9, 0.0)]) is None  # 0.3 < 0.2 + 0.15; 0.9 > 0.85
    assert usable(_row("x", 0.25, 0.1)) and not usable(_row("x", 0.24, 0.1))
    table = format_table(rows)
    assert table.count("**yes**") == 1 and "| t | mid | 40 | 0.60 |" in table


def test_chance_floors_are_the_scorers_verdicts_on_trivial_answers():
    sorting = chance_floor("number_sorting", "3numbers", size=600)
    # copying three numbers is right when they already come in the asked order: 1 in 6
    assert sorting["echo"] == pytest.approx(1 / 6, abs=0.05) and sorting["chance"] == sorting["echo"]
    letters = chance_floor("letter_counting", "3to5words", size=300)
    assert letters["constant"] > 0.3 and letters["chance"] == letters["constant"]  # "1" is the commonest count
    assert chance_floor("word_sequence_reversal", "3to4words", size=200)["chance"] < 0.05


class Gold:
    """Answers every question with its gold answer."""

    def __init__(self) -> None:
        from pivotgym_reasoning.env import ReasoningEnv, generate_entries
        from pivotgym_reasoning.tasks import SEEDS

        self.gold: dict[str, str] = {}
        for level in TASKS["spell_backward"].levels:
            env = ReasoningEnv("spell_backward", level=level)
            for e in generate_entries(env.reasoning_task, level, SEEDS["calibration"], 10):
                self.gold[e["question"]] = e["answer"]

    def sample(self, prompts, n=1, params=None):
        return [[Completion(self.gold[p[-1]["content"]], token_ids=[1], finish_reason="stop")] for p in prompts]


def test_calibration_stops_at_the_ceiling_only_when_asked_for_every_level():
    rows = calibrate(Gold(), ["spell_backward"], n=10, progress=False)
    assert [r["level"] for r in rows] == list(TASKS["spell_backward"].levels)  # perfect: above ceiling, go on
    assert all(r["accuracy"] == 1.0 and r["parse_rate"] == 1.0 for r in rows)
    assert choose_level(rows) is None
