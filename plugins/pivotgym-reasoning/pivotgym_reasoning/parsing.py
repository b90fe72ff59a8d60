"""Reading a final answer out of a free-text reply, one reader per answer kind.

Every reader is linear in the text (plain string scans and regexes without nested quantifiers, as
:mod:`pivotgym.parsing` requires of anything that runs on policy output) and looks at most at the first
:data:`MAX_PARSE_CHARS` characters. A reader returns the answer as the text the reasoning-gym scorer expects
(e.g. a JSON list of strings for number lists), or None when the reply holds no answer of that kind: that
None is what the parse rate counts.

A reply is read line by line, and the first non-empty line that holds an answer of the kind gives it. Within
a line, the answer is what follows the last ``=`` (``3 + 4 = 7``), ``->`` (``sun -> nus``) or ``:``
(``Answer: 7``) when there is one, so a reply that restates the question before answering is read right.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from pivotgym.parsing import normalize_answer

__all__ = [
    "KINDS",
    "MAX_PARSE_CHARS",
    "NUMBER_WORDS",
    "parse_answer",
    "read_integer",
    "read_number",
    "read_number_list",
    "read_word",
    "read_words",
]

#: the most characters of a reply that a reader looks at (the answers here are a few dozen characters)
MAX_PARSE_CHARS = 2000

_INTEGER = re.compile(r"-?\d+(?:,\d{3})*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?$")
_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_TOKEN = re.compile(r"\w[\w'-]*")
_MARKERS = ("=", "->", ":")
_STRIP = " \t.,;!?\"'`()[]{}*"


def _lines(reply: str) -> list[str]:
    return [line.strip() for line in reply[:MAX_PARSE_CHARS].splitlines() if line.strip()]


def _after_marker(line: str) -> str:
    """The part of ``line`` after its last answer marker (``=``, ``->``, ``:``) when something follows it."""
    cut = max(line.rfind(marker) + len(marker) if marker in line else -1 for marker in _MARKERS)
    if cut >= 0 and line[cut:].strip():
        return line[cut:].strip()
    return line


def _first_line(reply: str, read: Callable[[str], str | None]) -> str | None:
    for line in _lines(reply):
        answer = read(_after_marker(line))
        if answer is not None:
            return answer
    return None


#: number words a small model answers counting questions with ("appears twice")
NUMBER_WORDS = {
    word: i
    for i, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"once": 1, "twice": 2, "thrice": 3}


def _integer(segment: str) -> str | None:
    found = [m.group(0).replace(",", "") for m in _INTEGER.finditer(segment)]
    if not found:
        words = [NUMBER_WORDS[w] for w in (m.group(0).lower() for m in _WORD.finditer(segment)) if w in NUMBER_WORDS]
        return str(words[-1]) if words else None
    value = found[-1]
    sign = "-" if value.startswith("-") else ""
    return sign + (value.lstrip("-").lstrip("0") or "0")


def read_integer(reply: str) -> str | None:
    """The integer a reply answers (the last one in its answering line: ``5 - 3 = 2`` gives ``2``, ``There
    are 8 legs.`` gives ``8``), with thousands commas and leading zeros dropped; a line without digits is read
    by its last number word (``appears twice`` gives ``2``, up to twenty); None when there is neither."""
    return _first_line(reply, _integer)


def _word(segment: str) -> str | None:
    word = segment.strip(_STRIP)
    return word if _WORD.fullmatch(word) else None


def _number(segment: str) -> str | None:
    found = [m.group(0) for m in _DECIMAL.finditer(segment)]
    return found[-1] if found else None


def read_number(reply: str) -> str | None:
    """The number (integer or decimal) a reply answers: the last one in its answering line (``4.8 - 0.6 =
    4.2`` gives ``4.2``); None when there is none."""
    return _first_line(reply, _number)


def read_word(reply: str) -> str | None:
    """The one word an answering line holds (``nus``, ``"nus".``, ``sun -> nus``, ``Answer: nus``); None
    when no line is a single word (prose such as ``Let me think.`` is no answer)."""
    return _first_line(reply, _word)


def _items(segment: str, *, spaces: bool = True) -> list[str]:
    """The items of a list in ``segment``: inside its first ``[...]`` when it has one, split at commas, or
    (with ``spaces``, when there is no comma) at whitespace."""
    inner = segment
    start = segment.find("[")
    if start >= 0:
        end = segment.find("]", start + 1)
        inner = segment[start + 1 : end if end >= 0 else len(segment)]
    parts = inner.split(",") if "," in inner or not spaces else inner.split()
    return [p.strip(_STRIP) for p in parts if p.strip(_STRIP)]


def _words(segment: str) -> str | None:
    items = _items(segment, spaces=False)
    if len(items) < 2 or not all(_TOKEN.fullmatch(item) for item in items):
        return None
    return ", ".join(items)


def read_words(reply: str) -> str | None:
    """A comma-separated list of two or more words or numbers (``go, hundred``, ``[go, 1500]``) written as
    reasoning-gym writes one (comma and space); None when no line is one. A list without commas is no
    answer: the question asks for commas, and prose (``Let me think``) would otherwise read as a list."""
    return _first_line(reply, _words)


def _numbers(segment: str) -> str | None:
    items = _items(segment)
    if not items or not all(_NUMBER.match(item) for item in items):
        return None
    return json.dumps(items)


def read_number_list(reply: str) -> str | None:
    """A list of numbers (``['1', '7']``, ``[1, 7]`` or ``1, 7``) as a JSON list of strings; None when the
    reply has no line that is a list of numbers."""
    bracketed = reply[:MAX_PARSE_CHARS].find("[")
    if bracketed >= 0:  # a bracketed list wins wherever it is ("Sorted: ['1', '7']")
        answer = _numbers(reply[bracketed:MAX_PARSE_CHARS])
        if answer is not None:
            return answer
    return _first_line(reply, _numbers)


#: answer kind -> reader
KINDS: dict[str, Callable[[str], str | None]] = {
    "integer": read_integer,
    "number": read_number,
    "word": read_word,
    "words": read_words,
    "number_list": read_number_list,
}


def parse_answer(kind: str, reply: str) -> str | None:
    """The answer of ``kind`` in ``reply`` (see :data:`KINDS`), or None when none can be read."""
    if normalize_answer(reply) == "":
        return None
    return KINDS[kind](reply)
