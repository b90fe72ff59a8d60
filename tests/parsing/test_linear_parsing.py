"""The linear scanners that replaced backtracking regexes on agent text (issue 22: no parser can hold the host).

Each scanner must read exactly what the regex it replaced read - checked against that regex, kept here as
the reference, on thousands of random short strings drawn from the characters that matter to it (where the
regex is still fast) - and must stay fast on the long hostile strings that made the regex hold the GIL for
seconds to hours.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from pivotgym.parsing.answers import (
    answer_letter,
    defines_function,
    extract_code,
    letter_list,
    python_problem,
    read_choice,
    scope_depth,
)
from pivotgym.parsing.fences import json_fences, unfence

# ---- the regexes the scanners replaced (reference semantics)
OLD_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)
OLD_EMBEDDED_FENCE = re.compile(r"```(?:json)?\s*([\[{].*?[\]}])\s*```", re.DOTALL)
OLD_LETTER_LIST = re.compile(r"^\s*\(?[A-Z]\)?(?:\s*(?:,|/|;|\bor\b|\band\b)?\s*\(?[A-Z]\)?)+\s*\.?\s*$")
OLD_ANSWER_IS = re.compile(r"\banswer(?:\s+is)?\s*:?\s*(?:option\s+)?\(?((?-i:[A-Z]))\)?(?![A-Za-z])", re.IGNORECASE)

N_RANDOM = 4000


def _random_strings(pieces: list[str], seed: int, max_pieces: int = 10, wrap: tuple[str, str] = ("", "")) -> list[str]:
    """Random concatenations of ``pieces``; every other one between ``wrap``'s two ends, so that a good share
    of them match the reference regex (the counts are asserted where it is used)."""
    rng = random.Random(seed)
    out = []
    for i in range(N_RANDOM):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, max_pieces)))
        out.append(wrap[0] + text + wrap[1] if i % 2 else text)
    return out


def _old_unfence(text: str) -> str:
    m = OLD_FENCE.match(text)
    return m.group(1).strip() if m else text


def _old_letter_list(text: str) -> list[str] | None:
    return re.findall(r"[A-Z]", text) if OLD_LETTER_LIST.match(text) else None


def _old_answer_letter(text: str) -> str | None:
    m = OLD_ANSWER_IS.search(text)
    return m.group(1) if m else None


# ---- same readings as before
def test_unfence_reads_what_the_fence_regex_read():
    pieces = ["```", "`", "json", "py", "x", "-", " ", "\n", "{", "}", "\t", "a1"]
    texts = _random_strings(pieces, seed=1, wrap=("```", "```"))
    for text in texts:
        assert unfence(text) == _old_unfence(text), repr(text)
    assert sum(bool(OLD_FENCE.match(t)) for t in texts) > N_RANDOM // 3
    assert unfence('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert unfence("```\n[f(x=1)]\n```\n") == "[f(x=1)]"
    assert unfence("no fence") == "no fence"


def test_json_fences_find_what_the_embedded_fence_regex_found():
    pieces = ["```", "```", "`", "json", " ", "\n", "[", "]", "{", "}", "[1]", "x"]
    texts = _random_strings(pieces, seed=2, max_pieces=12, wrap=("```[", "]```"))
    assert sum(bool(OLD_EMBEDDED_FENCE.search(t)) for t in texts) > N_RANDOM // 3
    for text in texts:
        blocks = json_fences(text)
        assert [body for _s, _e, body in blocks] == OLD_EMBEDDED_FENCE.findall(text), repr(text)
        assert [(s, e) for s, e, _b in blocks] == [m.span() for m in OLD_EMBEDDED_FENCE.finditer(text)], repr(text)
    text = 'Let me look.\n```json\n{"name": "view"}\n```\nthen ```[1]``` done'
    assert [b for _s, _e, b in json_fences(text)] == ['{"name": "view"}', "[1]"]


def test_letter_list_accepts_what_the_letter_list_regex_accepted():
    pieces = ["A", "B", "C", "(", ")", " ", " ", ",", "/", ";", " or ", "or", " and ", ".", "\n", "x", "orb", "!"]
    texts = _random_strings(pieces, seed=3, wrap=("A", "B"))
    for text in texts:
        assert letter_list(text) == _old_letter_list(text), repr(text)
    assert sum(bool(OLD_LETTER_LIST.match(t)) for t in texts) > N_RANDOM // 10
    assert letter_list("A, B or C") == ["A", "B", "C"]
    assert letter_list("(A)(B)") == ["A", "B"]
    assert letter_list("A/B.") == ["A", "B"]
    assert letter_list("A") is None and letter_list("A or b") is None and letter_list("AorB") is None


def test_answer_letter_finds_what_the_answer_is_regex_found():
    pieces = ["answer", "Answer", "ANSWER", " is", "is", " ", " ", ": ", "option ", "Option", "(", ")", "A", "B"]
    pieces += ["A", "B", "(C)", " ", "x", "I", "s", "\n", "an", "\u017f", "\u0131"]  # long s, dotless i: fold to s, i
    texts = _random_strings(pieces, seed=4, max_pieces=6, wrap=("answer", ""))
    for text in texts:
        assert answer_letter(text) == _old_answer_letter(text), repr(text)
    assert sum(bool(OLD_ANSWER_IS.search(t)) for t in texts) > N_RANDOM // 20
    assert answer_letter("The correct answer is (C).") == "C"
    assert answer_letter("Answer: B") == "B"
    assert answer_letter("the answer is option D") == "D"
    assert answer_letter("my answer Alice") is None


def test_read_choice_keeps_its_readings():
    choices = ["orange ball", "red ball", "blue ball", "green ball"]
    assert read_choice("(B)", choices) == 1
    assert read_choice("C.", choices) == 2
    assert read_choice("The correct answer is (D).", choices) == 3
    assert read_choice("A, B or C", choices) is None  # a hedge
    assert read_choice("(A) or (B)", choices) is None
    assert read_choice("red ball", choices) == 1
    assert read_choice("A man is here. The answer is (C)", choices) == 2


def test_defines_function_reads_what_the_multiline_regex_read():
    name = "has_close_elements"
    old = re.compile(rf"^\s*def\s+{name}\s*\(", re.MULTILINE)
    pieces = ["def", " ", "\t", "\n", "\r\n", name, "(", "x", "  ", "#"]
    for text in _random_strings(pieces, seed=5):
        if "def\n" in text or f"{name}\n" in text or "def\r" in text or f"{name}\r" in text:
            continue  # a def split over lines: not Python, compiled and refused either way
        assert defines_function(text, name) == bool(old.search(text)), repr(text)
    assert defines_function("import math\n\n    def has_close_elements(numbers, t):\n", name)
    assert not defines_function("x = has_close_elements(1)", name)


def test_extract_code_reads_the_first_python_block():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1\n"
    assert extract_code("    return 1\n") == "    return 1\n"


def test_python_problem_refuses_deep_scopes_and_reports_syntax_errors():
    assert python_problem("def f():\n    return 1\n") is None
    deep = "x = " + "lambda: " * 60 + "1"
    assert "nested 60 deep" in (python_problem(deep) or "")
    assert str(python_problem("def f(:\n")).startswith("SyntaxError")
    assert str(python_problem("(" * 10_000)).split(":")[0] in ("SyntaxError", "RecursionError", "MemoryError")
    assert scope_depth(compile("[[y for y in x] for x in z]", "<t>", "exec", 1024)) == 2


# ---- and fast on what made the regexes hold the GIL
HOSTILE_SCANS = {
    "unfence: fence + spaces": (unfence, "```" + " " * 1_000_000 + "y```"),
    "unfence: long language tag": (unfence, "```" + "a" * 1_000_000),
    "json_fences: unclosed openings": (json_fences, "```[" * 250_000),
    "json_fences: brackets before spaces": (json_fences, "```[" + "] " * 500_000),
    "letter_list: spaced letters": (letter_list, "A" + "  A" * 300_000 + "!"),
    "letter_list: separators": (letter_list, "A" + " , A" * 250_000 + "x"),
    "answer_letter: spaces": (answer_letter, "answer" + " " * 1_000_000),
    "answer_letter: repeated": (answer_letter, "answer is " * 100_000),
    "defines_function: CRLF": (lambda t: defines_function(t, "f"), "\r\n" * 500_000),
    "defines_function: def + spaces": (lambda t: defines_function(t, "f"), "def" + " " * 1_000_000),
    "extract_code: fences + tabs": (extract_code, ("```python" + " \t" * 20) * 20_000),
    "read_choice: spaced letters": (lambda t: read_choice(t, ["a", "b", "c"]), "A" + "  A" * 300_000 + "!"),
}


@pytest.mark.parametrize("label", list(HOSTILE_SCANS))
def test_each_scanner_reads_a_hostile_megabyte_in_well_under_a_second(label):
    scan, text = HOSTILE_SCANS[label]
    start = time.monotonic()
    scan(text)
    took = time.monotonic() - start
    assert took < 1.5, f"{label}: {took:.2f}s on {len(text)} characters"
