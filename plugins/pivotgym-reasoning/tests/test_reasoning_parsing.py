"""The answer readers on known replies, and their cost on hostile ones."""

from __future__ import annotations

import json
import time

import pytest
from pivotgym_reasoning.parsing import (
    parse_answer,
    read_integer,
    read_number,
    read_number_list,
    read_word,
    read_words,
)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("-4", "-4"),
        ("5 - 3 - 6 = -4", "-4"),
        ("The answer is 12.", "12"),
        ("Answer: 007", "7"),
        ("There are 1,200 legs.", "1200"),
        ("\n\n  8\nbecause 2 dogs", "8"),
        ("5 - 3 = 2, 2 - 6 = -4", "-4"),
        ('The letter "h" appears twice in', "2"),
        ("There are three.", "3"),
        ("I do not know", None),
        ("I have no idea", None),
        ("", None),
    ],
)
def test_read_integer(reply, expected):
    assert read_integer(reply) == expected


def test_read_number():
    assert read_number("4.8 - 0.6 = 4.2") == "4.2"
    assert read_number("-3.5") == "-3.5" and read_number("The sum is 7.") == "7"
    assert read_number("no number") is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("['1', '7', '11']", ["1", "7", "11"]),
        ("[1, 7, 11]", ["1", "7", "11"]),
        ("Sorted: ['-3.5', '2.0']", ["-3.5", "2.0"]),
        ("1, 7, 11", ["1", "7", "11"]),
        ("1 7 11", ["1", "7", "11"]),
        ("[one, two]", None),
        ("no numbers here", None),
    ],
)
def test_read_number_list(reply, expected):
    answer = read_number_list(reply)
    assert (json.loads(answer) if answer is not None else None) == expected


def test_read_word_and_words():
    assert read_word("nus") == "nus"
    assert read_word("sun -> nus") == "nus"
    assert read_word('"ainomma".') == "ainomma"
    assert read_word("Answer: nus") == "nus"
    assert read_word("123") is None
    assert read_word("Let me think about it.") is None  # prose is no answer
    assert read_words("go, hundred") == "go, hundred"
    assert read_words("Reversed: [go, 1500, hundred]") == "go, 1500, hundred"
    assert read_words("go,hundred.") == "go, hundred"
    assert read_words("go hundred") is None  # the question asks for commas
    assert read_words("Let me think about it.") is None
    assert read_words("!!!") is None


def test_parse_answer_dispatches_by_kind_and_refuses_blank_replies():
    assert parse_answer("integer", "x = 3") == "3"
    assert parse_answer("words", "a, b") == "a, b"
    assert parse_answer("integer", "   \n ") is None
    with pytest.raises(KeyError):
        parse_answer("no-such-kind", "3")


@pytest.mark.parametrize(
    "hostile",
    ["1," * 50_000, "=" * 100_000, "[" + "1 " * 50_000, "a-" * 50_000, ":" + " " * 100_000 + "x", "-" * 100_000],
)
def test_readers_stay_fast_on_hostile_replies(hostile):
    started = time.perf_counter()
    for kind in ("integer", "number", "word", "words", "number_list"):
        parse_answer(kind, hostile)
    assert time.perf_counter() - started < 1.0
