"""SWE-smith-style AST mutations: small, plausible bugs in real code.

Each :class:`Mutation` replaces one source span found through the AST (so the rest of the file keeps its
formatting) and is described by the whole lines it touches, which is also what the expert's repair edit
reverts. Operators: flip an arithmetic or comparison operator, swap ``and``/``or``, drop a ``not`` or a
condition, shift an integer constant by one, swap two call arguments, drop a ``return`` value.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass

BIN_FLIPS = {
    ast.Add: "-",
    ast.Sub: "+",
    ast.Mult: "//",
    ast.FloorDiv: "*",
    ast.Mod: "//",
    ast.LShift: ">>",
    ast.RShift: "<<",
    ast.BitAnd: "|",
    ast.BitOr: "&",
}
CMP_FLIPS = {
    ast.Lt: "<=",
    ast.LtE: "<",
    ast.Gt: ">=",
    ast.GtE: ">",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.In: "not in",
    ast.NotIn: "in",
    ast.Is: "is not",
    ast.IsNot: "is",
}


@dataclass(frozen=True)
class Mutation:
    path: str
    function: str
    operator: str
    lineno: int  # 1-based first line of the changed lines
    end_lineno: int
    original: str  # the changed lines before the mutation (with their newlines)
    mutated: str  # the same lines after it

    def to_dict(self) -> dict:
        return asdict(self)

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        current = "".join(lines[self.lineno - 1 : self.end_lineno])
        if current != self.original:
            raise ValueError(f"{self.path}:{self.lineno}: source differs from the mutation's original lines")
        return "".join(lines[: self.lineno - 1]) + self.mutated + "".join(lines[self.end_lineno :])


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.bytelines = [line.encode() for line in self.lines]

    def replace(self, node_start: tuple[int, int], node_end: tuple[int, int], new: str) -> tuple[int, int, str, str]:
        (l1, c1), (l2, c2) = node_start, node_end
        block = b"".join(self.bytelines[l1 - 1 : l2])
        start = c1
        end = sum(len(b) for b in self.bytelines[l1 - 1 : l2 - 1]) + c2
        mutated = block[:start] + new.encode() + block[end:]
        return l1, l2, block.decode(), mutated.decode()

    def segment(self, node: ast.AST) -> str:
        """The source text of ``node`` (what ``ast.get_source_segment`` gives, without re-splitting the file)."""
        span = _span(node)
        if span is None:
            return ""
        (l1, c1), (l2, c2) = span
        if l1 == l2:
            return self.bytelines[l1 - 1][c1:c2].decode()
        parts = [self.bytelines[l1 - 1][c1:], *self.bytelines[l1 : l2 - 1], self.bytelines[l2 - 1][:c2]]
        return b"".join(parts).decode()


#: where a node starts and ends in the source: ``((line, column), (end line, end column))``, columns in bytes
Span = tuple[tuple[int, int], tuple[int, int]]


def _span(first: ast.AST, last: ast.AST | None = None) -> Span | None:
    """From where ``first`` starts to where ``last`` (default: ``first``) ends; None without positions."""
    end = first if last is None else last
    l1, c1 = getattr(first, "lineno", None), getattr(first, "col_offset", None)
    l2, c2 = getattr(end, "end_lineno", None), getattr(end, "end_col_offset", None)
    if l1 is None or c1 is None or l2 is None or c2 is None:
        return None
    return (l1, c1), (l2, c2)


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                ids.add(id(first.value))
    return ids


def candidate_mutations(path: str, text: str) -> list[Mutation]:
    """Every mutation this module knows for the functions of one file, in source order, deduplicated."""
    tree = ast.parse(text)
    src = _Source(text)
    docstrings = _docstring_nodes(tree)
    found: dict[tuple[int, str], Mutation] = {}

    def add(fn: ast.FunctionDef | ast.AsyncFunctionDef, op: str, span: Span | None, new: str) -> None:
        if span is None:
            return
        l1, l2, original, mutated = src.replace(*span, new)
        if original == mutated or (l1, mutated) in found:
            return
        # a mutation stays inside one function: parsing that function alone (under an `if 1:` header when it
        # is indented) tells whether the mutated file parses, at a fraction of the cost of the whole file
        head = "if 1:\n" if fn.col_offset else ""
        text = head + "".join(src.lines[fn.lineno - 1 : l1 - 1]) + mutated + "".join(src.lines[l2 : fn.end_lineno])
        try:
            ast.parse(text)
        except SyntaxError:
            return
        found[(l1, mutated)] = Mutation(path, fn.name, op, l1, l2, original, mutated)

    for fn in _functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and type(node.op) in BIN_FLIPS and node.lineno == node.end_lineno:
                left, right = src.segment(node.left), src.segment(node.right)
                if left and right:
                    new = f"{left} {BIN_FLIPS[type(node.op)]} {right}"
                    add(fn, "flip_operator", _span(node), new)
            elif (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and type(node.ops[0]) in CMP_FLIPS
                and node.lineno == node.end_lineno
            ):
                left, right = src.segment(node.left), src.segment(node.comparators[0])
                if left and right:
                    new = f"{left} {CMP_FLIPS[type(node.ops[0])]} {right}"
                    add(fn, "flip_comparison", _span(node), new)
            elif isinstance(node, ast.BoolOp) and len(node.values) == 2 and node.lineno == node.end_lineno:
                a, b = (src.segment(v) for v in node.values)
                if a and b:
                    word = "or" if isinstance(node.op, ast.And) else "and"
                    add(fn, "swap_boolean", _span(node), f"{a} {word} {b}")
                    add(fn, "drop_condition", _span(node), a)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and node.lineno == node.end_lineno:
                inner = src.segment(node.operand)
                if inner:
                    add(fn, "drop_negation", _span(node), inner)
            elif (
                isinstance(node, ast.Constant)
                and type(node.value) is int
                and id(node) not in docstrings
                and 0 <= node.value <= 10
                and node.lineno == node.end_lineno
            ):
                add(fn, "off_by_one", _span(node), str(node.value + 1))
                if node.value > 0:
                    add(fn, "off_by_one", _span(node), str(node.value - 1))
            elif (
                isinstance(node, ast.Call)
                and len(node.args) == 2
                and not node.keywords
                and not any(isinstance(a, ast.Starred) for a in node.args)
                and node.lineno == node.end_lineno
            ):
                a, b = (src.segment(x) for x in node.args)
                if a and b and a != b:
                    first, last = node.args
                    add(fn, "swap_arguments", _span(first, last), f"{b}, {a}")
            elif (
                isinstance(node, ast.Return)
                and node.value is not None
                and node.lineno == node.end_lineno
                and not (isinstance(node.value, ast.Constant) and node.value.value is None)
            ):
                add(fn, "drop_return_value", _span(node), "return None")
    return sorted(found.values(), key=lambda m: (m.lineno, m.mutated))


def sample_mutations(files: dict[str, str], seed: int) -> list[Mutation]:
    """All candidate mutations of ``files`` (path -> text) in a seeded random order."""
    rng = random.Random(seed)
    groups: dict[str, list[Mutation]] = {}
    for path in sorted(files):
        for m in candidate_mutations(path, files[path]):
            groups.setdefault(m.operator, []).append(m)
    for name in sorted(groups):
        rng.shuffle(groups[name])
    order = sorted(groups)
    out: list[Mutation] = []
    while any(groups.values()):  # round-robin over operators, so no one kind of bug dominates
        rng.shuffle(order)
        for name in order:
            if groups[name]:
                out.append(groups[name].pop())
    return out


def normalized_ast(text: str) -> str | None:
    """A formatting- and comment-independent form of a Python file (None when it does not parse), parsed from its
    UTF-8 bytes as the import system reads them: a coding declaration (``# coding: utf-7``) is honoured, so a
    comment that the declared codec turns into code is code here too."""
    try:
        return ast.dump(ast.parse(text.encode("utf-8", "surrogatepass")), include_attributes=False)
    except (SyntaxError, RecursionError, MemoryError, ValueError):  # deep nesting, NUL bytes: not comparable
        return None
