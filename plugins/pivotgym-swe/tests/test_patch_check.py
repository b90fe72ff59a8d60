"""The patch check reads what Python executes: generated sources, with coding declarations, byte-order marks,
other line endings and comments that a codec turns into code, go through the check's view and through
``compile()``; they must agree on what is code, and a file whose compiled code differs from the pristine one is
never passed as unchanged."""

from __future__ import annotations

import ast
import random

import pytest

from pivotgym_swe.patch_check import check_source, declared_encoding, python_view

PREFIXES = [
    b"",
    b"\xef\xbb\xbf",
    b"# coding: utf-7\n",
    b"# -*- coding: latin-1 -*-\n",
    b"#!/usr/bin/env python\n# coding: utf-8\n",
    b"# vim: set fileencoding=utf-16 :\n",
    b"# coding: utf-7\r",
    b"# coding=cp1252\n",
    b"\n# coding: utf-7\n",
    b"# coding: rot13\n",
]
LINES = [
    b"x = 1",
    b"# note +AAo-y = 2",
    b"s = '+AAo-z = 3'",
    b"def f(a) -> int:\n    return a",
    b"# \xe9t\xe9 +AAo-w = 4",
    b"t = '\xc3\xa9'",
    b"\x0c",
    b"u = (1 +\n     2)",
    b"# +ACM- +AAo-import os",
    b"class C:\n    v = 4",
    b"r = 'a' # \\\nq = 5",
]
ENDINGS = [b"\n", b"\r\n", b"\r"]


def source(rng: random.Random) -> tuple[bytes, bytes]:
    """A generated file and the same body without its prefix (the pristine file it claims to be)."""
    ending = rng.choice(ENDINGS)
    body = ending.join(rng.choice(LINES).replace(b"\n", ending) for _ in range(rng.randint(1, 6))) + ending
    return rng.choice(PREFIXES) + body, body


def compiled(src: bytes) -> str | None:
    try:
        return ast.dump(compile(src, "m.py", "exec", ast.PyCF_ONLY_AST))
    except (SyntaxError, ValueError):
        return None


@pytest.mark.parametrize("seed", range(8))
def test_the_check_and_compile_agree_on_what_is_code(seed):
    rng = random.Random(seed)
    for _ in range(60):
        src, pristine = source(rng)
        expected = compiled(src)
        try:
            seen = ast.dump(python_view(src))
        except (SyntaxError, ValueError):
            seen = None
        assert seen == expected, src
        if expected is not None and expected != compiled(pristine):  # a codec made other code of the same text
            assert check_source("m.py", src, pristine), src


def test_a_declared_encoding_other_than_utf8_or_a_changed_one_is_refused():
    body = b"x = 1\n"
    assert declared_encoding(b"# coding: utf-7\n" + body) == "utf-7"
    assert declared_encoding(body) == "utf-8"
    for prefix in (b"# coding: utf-7\n", b"# coding: latin-1\n", b"\xef\xbb\xbf"):
        rejections = check_source("m.py", prefix + body + b"y = 2\n", body + b"y = 2\n")
        assert [r.code for r in rejections] == ["encoding"], prefix
    assert check_source("m.py", b"# coding: utf-8\nx = 1\n", body) == []  # the same encoding, declared: fine
