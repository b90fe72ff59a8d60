"""Final answers in agent text: multiple-choice letters, loose text identity, fenced code, and a bounded
compile check for code that the host compiles.

These run in an env's step thread and in verifiers, on whatever a policy wrote, so each is linear in the
text. The multiple-choice readers used to be regexes with nested quantifiers - a letter list
``^\\s*\\(?[A-Z]\\)?(?:\\s*(?:,|/|;|\\bor\\b|\\band\\b)?\\s*\\(?[A-Z]\\)?)+\\s*\\.?\\s*$`` and
``\\banswer(?:\\s+is)?\\s*:?\\s*(?:option\\s+)?\\(?([A-Z])\\)?(?![A-Za-z])`` - on which the backtracking engine
tried every split of a run of spaces between the adjacent ``\\s*``: ``"A" + "  A" * 15 + "!"`` (47
characters) took 28 s, 56 characters 395 s, and ``"answer"`` + 14,000 spaces 10 s, all holding the GIL so
that no step deadline could fire. They are tokenising scanners now (:func:`letter_list`,
:func:`answer_letter`) that accept exactly what the regexes accepted (the tests compare them on random
strings) and look at each character a bounded number of times.

Compiling agent code on the host is bounded too (:func:`python_problem`): at most :data:`MAX_CODE_CHARS`
characters of the reply's code, and functions, lambdas, classes and comprehensions nested at most
:data:`MAX_SCOPE_DEPTH` deep (CPython's compiler is quadratic in that depth: 2,900 nested lambdas, 20,000
characters, took 1.6 s; a 6 MB list literal took 16.7 s and 2.2 GB).
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Sequence

from pivotgym.parsing.fences import skip_space

__all__ = [
    "LETTERS",
    "MAX_CODE_CHARS",
    "MAX_SCOPE_DEPTH",
    "answer_letter",
    "defines_function",
    "extract_code",
    "letter_list",
    "names_several_letters",
    "normalize_answer",
    "python_problem",
    "read_choice",
    "scope_depth",
]

LETTERS = string.ascii_uppercase
#: the most characters of code a reply may carry into a compile on the host (HumanEval solutions are well
#: under 2,000; the compiler's time and memory grow with the text)
MAX_CODE_CHARS = 20_000
#: the deepest nesting of functions, lambdas, classes and comprehensions that is compiled on the host
MAX_SCOPE_DEPTH = 50

_WS = re.compile(r"\s+")
#: the word "answer", case-insensitive, at a word start (a fixed-length literal: linear)
_ANSWER_WORD = re.compile(r"\banswer", re.IGNORECASE)
#: single-token pieces of the "answer is (C)" reading, matched at a given index (each O(1))
_IS = re.compile(r"is", re.IGNORECASE)
_OPTION = re.compile(r"option", re.IGNORECASE)
_ANY_LETTER = re.compile(r"[A-Za-z]", re.IGNORECASE)
#: a reply that opens with an option letter: "B", "(B)", "B.", "B: because" (anchored, constant time)
_LEADING_LETTER = re.compile(r"^\(?([A-Z])\)?(?:[.:)\s]|$)")
_BRACKETED_LETTER = re.compile(r"\(([A-Z])\)")
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


# ----------------------------------------------------------------------------------------- text answers
def normalize_answer(text: str) -> str:
    """Loose answer identity: case-folded, whitespace collapsed, surrounding quotes/punctuation dropped."""
    return _WS.sub(" ", text).strip().strip(" .!\"'`").casefold()


def _is_word(ch: str) -> bool:
    """Whether ``ch`` is a word character as the ``re`` module's ``\\w`` sees it in a str pattern."""
    return ch.isalnum() or ch == "_"


# ----------------------------------------------------------------------------------------- option letters
def _letter_item(text: str, i: int) -> tuple[str, int] | None:
    """An option letter at ``i`` with optional brackets (``B``, ``(B)``, ``(B``, ``B)``): (letter, end)."""
    n = len(text)
    if i < n and text[i] == "(":
        i += 1
    if i >= n or not "A" <= text[i] <= "Z":
        return None
    letter, i = text[i], i + 1
    if i < n and text[i] == ")":
        i += 1
    return letter, i


def _separator_end(text: str, i: int) -> int:
    """The index after a list separator at ``i`` (``,`` ``/`` ``;`` or the words ``or``/``and``), else ``i``."""
    if i < len(text) and text[i] in ",/;":
        return i + 1
    for word in ("or", "and"):
        end = i + len(word)
        if (
            text.startswith(word, i)
            and (i == 0 or not _is_word(text[i - 1]))
            and (end == len(text) or not _is_word(text[end]))
        ):
            return end
    return i


def letter_list(text: str) -> list[str] | None:
    """The letters of a reply that is nothing but a list of two or more option letters (``A B``, ``(A)(B)``,
    ``A, B or C``, ``A/B.``), else None.

    One left-to-right pass: an item, then (whitespace, an optional separator, whitespace, an item) as often
    as it repeats, then whitespace, an optional full stop and whitespace to the end. Greedy is exact here -
    whitespace, separators and items share no first character - so nothing is ever tried twice."""
    first = _letter_item(text, skip_space(text, 0))
    if first is None:
        return None
    letters, pos = [first[0]], first[1]
    while True:
        item = _letter_item(text, skip_space(text, _separator_end(text, skip_space(text, pos))))
        if item is None:
            break
        letters.append(item[0])
        pos = item[1]
    end = skip_space(text, pos)
    if end < len(text) and text[end] == ".":
        end = skip_space(text, end + 1)
    return letters if end == len(text) and len(letters) > 1 else None


def _letter_after_answer(text: str, i: int) -> str | None:
    """The option letter that follows the word "answer" ending at ``i``: ``answer is (C)``, ``Answer: B``,
    ``the answer is option D``; None when none follows. The letter must not run on into a word (``answer
    Alice``)."""
    n = len(text)
    j = skip_space(text, i)
    if j > i and _IS.match(text, j):
        i = j + 2
    j = skip_space(text, i)
    if j < n and text[j] == ":":
        j += 1
    j = skip_space(text, j)
    option = _OPTION.match(text, j)
    if option:
        after = skip_space(text, option.end())
        if after > option.end():
            j = after
    item = _letter_item(text, j)
    if item is None:
        return None
    letter, _end = item
    after_letter = j + (2 if text[j] == "(" else 1)
    return None if _ANY_LETTER.match(text, after_letter) else letter


def answer_letter(text: str) -> str | None:
    """The letter of the first "the answer is (C)" / "Answer: C" / "answer is option C" in ``text``."""
    for match in _ANSWER_WORD.finditer(text):
        letter = _letter_after_answer(text, match.end())
        if letter is not None:
            return letter
    return None


def names_several_letters(text: str, n_choices: int) -> bool:
    """Whether ``text`` names two or more different option letters: two different parenthesised letters
    anywhere, or a bare list of letters."""
    valid = set(LETTERS[:n_choices])
    bracketed = set(_BRACKETED_LETTER.findall(text)) & valid
    listed = set(letter_list(text) or ()) & valid
    return len(bracketed) > 1 or len(listed) > 1


def read_choice(text: str, choices: Sequence[str]) -> int | None:
    """Which option a generated reply picks: the option text itself, or its letter (``B``, ``(B)``, ``B.``,
    ``The correct answer is (B)``).

    Returns None when the reply names no option or is ambiguous.
    """
    norm = normalize_answer(text)
    options = [normalize_answer(c) for c in choices]
    if norm in options:
        return options.index(norm)
    if names_several_letters(text, len(choices)):
        return None  # a hedge over several options is no answer, whichever of them is right
    # an explicit "the answer is (C)" wins over a leading capital ("A man ... The answer is (C)")
    letter = answer_letter(text)
    if letter is None:
        leading = _LEADING_LETTER.match(text.strip())
        letter = leading.group(1) if leading else None
    if letter is not None and LETTERS.index(letter) < len(choices):
        return LETTERS.index(letter)
    first = normalize_answer(text.strip().splitlines()[0]) if text.strip() else ""
    hits = [i for i, o in enumerate(options) if o and (first.startswith(o) or first.endswith(o))]
    return hits[0] if len(hits) == 1 else None


# ----------------------------------------------------------------------------------------- code
def extract_code(text: str) -> str:
    """The Python code of a reply: its first fenced block, or the whole reply when there is none.

    (The regex is linear: each opening fence is followed by a run of ``[ \\t]`` that only it scans, and once
    a newline follows, the lazy body always ends, at a fence or at the end.)"""
    m = _CODE_BLOCK.search(text)
    return m.group(1) if m else text


def defines_function(code: str, name: str) -> bool:
    """Whether a line of ``code`` starts (after indentation) with ``def name(`` - a reply that defines the
    entry point itself. Line by line: the multiline regex ``^\\s*def\\s+name\\s*\\(`` this replaces let
    ``\\s*`` run over every following blank line from every line start (a megabyte of CRLF: hours)."""
    head = re.compile(rf"def\s+{re.escape(name)}\s*\(")
    for line in code.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("def") and head.match(stripped):
            return True
    return False


def scope_depth(tree: ast.AST) -> int:
    """The deepest nesting of functions, lambdas, classes and comprehensions in ``tree`` (iterative: no
    recursion limit, whatever the depth)."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, _SCOPES):
            depth += 1
            deepest = max(deepest, depth)
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))
    return deepest


def python_problem(program: str, filename: str = "<reply>", *, max_scope_depth: int = MAX_SCOPE_DEPTH) -> str | None:
    """Why ``program`` cannot be compiled on the host (None when it compiles): a syntax error, nesting past
    ``max_scope_depth``, or what ``compile`` raises on hostile input besides SyntaxError - RecursionError
    (``"(A)" * 10000``), MemoryError, ValueError (NUL bytes, integer literals past Python's digit limit).

    Cap the untrusted part's length first (:data:`MAX_CODE_CHARS`): parsing and compiling are linear in the
    text except in the scope depth, which is checked on the tree before the compiler sees it."""
    try:
        tree = ast.parse(program, filename)
        depth = scope_depth(tree)
        if depth > max_scope_depth:
            return (
                f"functions, lambdas, classes or comprehensions nested {depth} deep "
                f"(at most {max_scope_depth} are compiled)"
            )
        compile(tree, filename, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


# ------------------------------------------------------------------------------------------ plain messages
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07?")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: control characters no text has (tab, line and page breaks aside)
_NONPRINTING_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_WORD_RE = re.compile(r"[^\W\d_]{2,}")
#: the longest plain message :func:`message_problem` accepts as one
MAX_MESSAGE_CHARS = 4000


def message_problem(text: str) -> str | None:
    """Why ``text`` is not a real plain message (None when it is): a message must contain a word of two or
    more letters, must not be one character repeated, must hold no control characters (terminal escape
    sequences aside, which are dropped) nor lone surrogates, and must stay under :data:`MAX_MESSAGE_CHARS`. This
    keeps empty replies, terminal noise and padding from counting as a deliberate answer, abstention or
    message to a user, wherever a verifier credits a message."""
    visible = _ANSI_RE.sub("", text or "")
    cleaned = _CONTROL_RE.sub("", visible).strip()
    if not cleaned:
        return "the message is empty"
    if _NONPRINTING_RE.search(visible):
        return "the message holds control characters"
    if any("\ud800" <= ch <= "\udfff" for ch in cleaned):
        return "the message holds lone surrogates (not valid text)"
    if len(cleaned) > MAX_MESSAGE_CHARS:
        return f"the message is longer than {MAX_MESSAGE_CHARS} characters"
    if len(set(cleaned)) == 1 or not _WORD_RE.search(cleaned):
        return "the message has no words"
    return None
