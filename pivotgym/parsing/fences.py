"""Fenced code blocks in agent text, found in one linear scan instead of with backtracking regexes.

The ``<tool_call>`` codec reads two kinds of fence:

* :func:`unfence` - the body of a reply that is exactly one fenced block (```` ```json\\n{...}\\n``` ````);
* :func:`json_fences` - every fenced block inside prose whose body is a JSON array or object.

Both used to be regexes (``^```[a-zA-Z0-9_-]*\\s*\\n?(.*?)\\n?```$`` and ``````(?:json)?\\s*([\\[{].*?[\\]}])\\s*``````,
``re.DOTALL``). A backtracking engine tries every split of the whitespace between the nested quantifiers, so
those took quadratic time on hostile replies: ```` ``` ```` followed by 30,000 spaces held the GIL for 14 s, and
5,000 unclosed ```` ```[ ```` openings for 0.8 s (a megabyte of them: hours). These scanners return exactly
what the regexes returned (``tests/parsing/test_linear_parsing.py`` compares them on random strings) and look
at each character a bounded number of times, whatever the input.
"""

from __future__ import annotations

import string

__all__ = ["FENCE", "json_fences", "skip_space", "unfence"]

FENCE = "```"
_LANG = frozenset(string.ascii_letters + string.digits + "_-")


def skip_space(text: str, i: int) -> int:
    """The first index at or after ``i`` that is not whitespace (``str.isspace``, which is what the ``re``
    module's ``\\s`` matches in a str pattern), or ``len(text)``."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def unfence(text: str) -> str:
    """The stripped body of ``text`` when all of it is one fenced block (an optional language tag after the
    opening fence, the closing fence last, a final newline allowed after it); otherwise ``text`` unchanged."""
    if not text.startswith(FENCE):
        return text
    end = len(text) - 1 if text.endswith("\n") else len(text)
    close = end - len(FENCE)
    if close < len(FENCE) or text[close:end] != FENCE:
        return text
    start = len(FENCE)
    while start < close and text[start] in _LANG:  # the language tag (``json``, ``python3``, ``tool-call``)
        start += 1
    return text[start:close].strip()


def _fence_positions(text: str) -> list[int]:
    """Every index where a fence starts, overlapping ones included (```````` ```` ```` has two)."""
    out: list[int] = []
    i = text.find(FENCE)
    while i >= 0:
        out.append(i)
        i = text.find(FENCE, i + 1)
    return out


def json_fences(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, body)`` of each fenced JSON block in ``text``, in order and not overlapping: an opening
    fence, optionally ``json``, whitespace, then a body that starts with ``[`` or ``{`` and ends at the first
    ``]`` or ``}`` that only whitespace separates from a closing fence. ``text[start:end]`` is the whole block.

    Linear: every fence is looked at as an opening at most once and as a closing at most once, and the
    whitespace before a closing fence is walked once. Once a well-started block finds no closing fence, no
    later block can (its body would start later still), so the scan stops there."""
    fences = _fence_positions(text)
    n = len(text)
    out: list[tuple[int, int, str]] = []
    opening = closing = 0  # indexes into ``fences``
    pos = 0  # where the next block may start (the end of the previous one)
    while opening < len(fences):
        start = fences[opening]
        opening += 1
        if start < pos:
            continue
        body = start + len(FENCE)
        if text.startswith("json", body):
            body += 4
        body = skip_space(text, body)
        if body >= n or text[body] not in "[{":
            continue
        closing = max(closing, opening)
        found = None
        while closing < len(fences):
            close = fences[closing]
            closing += 1
            last = close - 1
            while last > body and text[last].isspace():
                last -= 1
            if last > body and text[last] in "]}":
                found = (start, close + len(FENCE), text[body : last + 1])
                break
        if found is None:
            break
        out.append(found)
        pos = found[1]
    return out
