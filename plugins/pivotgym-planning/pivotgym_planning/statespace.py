"""Exact h* for large planning problems: bit-packed states, object symmetry, one breadth-first table.

Why: A* with a goal-count heuristic runs out of budget on problems with millions of reachable states
(gripper with 14 balls has about 2M), so the verifier could credit nothing there. Three measures make an
exact table of every reachable state cheap instead:

* **Bit-packed states.** A state is one Python ``int`` over the task's relevant ground facts; applying an
  operator is three bit operations. Operators are indexed by one precondition bit.
* **Symmetry reduction.** Two objects are interchangeable when swapping their names maps the grounded
  operator set and the goal onto themselves (statics are already compiled into the operators by the
  grounding, so they are respected). Such transpositions generate the full symmetric group on each class of
  interchangeable objects (gripper's balls, its two grippers, logistics airplanes), and every permutation in
  it preserves h*: h*(pi(s)) = h*(s). So states are stored in a canonical form (members of each class sorted
  by the facts they appear in) and the search runs on the much smaller quotient space. The canonical form
  need not be perfect (two symmetric states may keep two representatives): it always applies a real
  symmetry, so h* stays exact; only the compression would be less.
* **One table.** A forward breadth-first pass enumerates the canonical states reachable from the problem's
  initial state (up to ``max_states``), storing successor edges in flat ``array('I')`` buffers; a backward
  breadth-first pass over the reversed edges (numpy) gives the exact distance to the goal of every state.
  What stays in memory is the canonical-state -> index dict and one int32 distance per state
  (``benchmarks/planning_verifier.py`` measures the peak).

When the quotient space is larger than ``max_states`` the table is not built and :class:`ExactTable` says
so (``complete=False``); callers fall back to budgeted A* and report budget exhaustion explicitly.
"""

from __future__ import annotations

import math
import time
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: default cap on canonical states in one table (a few hundred MB at most; see the benchmark)
DEFAULT_MAX_STATES = 1_000_000
#: re-labellings remembered per symmetry class (a class's facts recur across many states)
MEMO_LIMIT = 200_000


def _split(atom: str) -> tuple[str, ...]:
    """``"(on a b)"`` -> ``("on", "a", "b")``."""
    return tuple(atom[1:-1].split())


def _join(parts: Iterable[str]) -> str:
    return "(" + " ".join(parts) + ")"


@dataclass
class SymmetryClass:
    """Interchangeable objects, with what is needed to re-label them inside a bit-packed state.

    Every fact mentioning a member has a *fine* template (the fact with that member replaced by ``*``, so
    ``bits[fine][m]`` is the same fact for member ``m``) and a *coarse* template that also replaces objects
    of other symmetry classes by their class. Members are ordered by their set of coarse templates: that
    order does not depend on how other classes are labelled, which makes the canonical form idempotent and
    lets a successor re-sort only the classes its operator touched.
    """

    members: tuple[str, ...]
    bits: list[list[int]] = field(default_factory=list)  # per fine template: bit per member
    mask: int = 0
    owner: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # bit -> (member, fine, coarse)
    memo: dict[int, int] = field(default_factory=dict)  # the class's facts -> re-labelled facts


def find_symmetry_classes(
    facts: list[str], operators: list[tuple[frozenset, frozenset, frozenset]], goals: frozenset[str]
) -> list[list[str]]:
    """Classes (size >= 2) of objects whose pairwise swaps map operators and goal onto themselves."""
    op_set = set(operators)
    objects: set[str] = set()
    for f in facts:
        objects.update(_split(f)[1:])
    # a cheap invariant first: an object's roles in operators and goals (same invariant needed to swap)
    roles: dict[str, Counter] = {o: Counter() for o in objects}
    involving: dict[str, list[int]] = {o: [] for o in objects}
    for i, (pre, add, dele) in enumerate(operators):
        seen: set[str] = set()
        for kind, atoms in (("p", pre), ("a", add), ("d", dele)):
            for atom in atoms:
                parts = _split(atom)
                for pos, obj in enumerate(parts[1:]):
                    roles[obj][(kind, parts[0], pos)] += 1
                    seen.add(obj)
        for obj in seen:
            involving[obj].append(i)
    for atom in goals:
        parts = _split(atom)
        for pos, obj in enumerate(parts[1:]):
            roles.setdefault(obj, Counter())[("g", parts[0], pos)] += 1
    groups: dict[tuple, list[str]] = {}
    for obj in sorted(objects):
        groups.setdefault(tuple(sorted(roles[obj].items())), []).append(obj)

    def swap_ok(a: str, b: str) -> bool:
        table = {a: b, b: a}

        def rename(atoms: frozenset) -> frozenset:
            return frozenset(_join(table.get(x, x) for x in _split(atom)) for atom in atoms)

        if rename(goals) != goals:
            return False
        for i in set(involving[a]) | set(involving[b]):
            pre, add, dele = operators[i]
            if (rename(pre), rename(add), rename(dele)) not in op_set:
                return False
        return True

    classes: list[list[str]] = []
    for group in groups.values():
        reps: list[list[str]] = []  # union by transpositions: a joins the first class whose head it swaps with
        for obj in group:
            for cls in reps:
                if swap_ok(cls[0], obj):
                    cls.append(obj)
                    break
            else:
                reps.append([obj])
        classes.extend(c for c in reps if len(c) > 1)
    return classes


class BitTask:
    """A grounded task over int bitsets, with the symmetry classes usable for canonical forms."""

    def __init__(self, task: Any, *, symmetry: bool = True) -> None:
        """``task`` is a :class:`pivotgym_planning.search.SearchTask` (operators, goals, relevant facts)."""
        self.facts: list[str] = sorted(task.relevant)
        self.index: dict[str, int] = {f: i for i, f in enumerate(self.facts)}
        self.ops: list[tuple[int, int, int, str]] = []  # (pre, add, del, name), name-sorted
        for op in task.operators:
            self.ops.append(
                (self._mask(op.preconditions), self._mask(op.add_effects), self._mask(op.del_effects), op.name)
            )
        self.goal = self._mask(task.goals)
        self._by_bit: dict[int, list[int]] = {}
        self._no_pre: list[int] = []
        for i, (pre, _a, _d, _n) in enumerate(self.ops):
            if pre:
                self._by_bit.setdefault((pre & -pre).bit_length() - 1, []).append(i)
            else:
                self._no_pre.append(i)
        self.classes: list[SymmetryClass] = []
        if symmetry:
            triples = [
                (frozenset(op.preconditions), frozenset(op.add_effects), frozenset(op.del_effects))
                for op in task.operators
            ]
            found = sorted(
                find_symmetry_classes(self.facts, triples, frozenset(task.goals)), key=lambda c: (-len(c), c)
            )
            class_of = {obj: i for i, members in enumerate(found) for obj in members}
            for i, members in enumerate(found):
                cls = self._class(members, i, class_of)
                if cls is not None:
                    self.classes.append(cls)

    def _mask(self, atoms: Iterable[str]) -> int:
        m = 0
        for a in atoms:
            m |= 1 << self.index[a]
        return m

    def _class(self, members: list[str], order: int, class_of: dict[str, int]) -> SymmetryClass | None:
        """The re-labelling tables of one class; ``None`` when a fact mentions two of its members (not
        covered by this simple canonical form: the class is then left unreduced, which is safe)."""
        position = {m: i for i, m in enumerate(members)}
        fine_ids: dict[tuple, int] = {}
        coarse_ids: dict[tuple, int] = {}
        cls = SymmetryClass(tuple(members))
        for bit, f in enumerate(self.facts):
            parts = _split(f)
            hits = [i for i, x in enumerate(parts) if i > 0 and x in position]
            if not hits:
                continue
            if len(hits) > 1:
                return None
            pos = hits[0]
            fine = parts[:pos] + ("*",) + parts[pos + 1 :]
            # the sort key keeps labels of classes re-labelled before this one and abstracts later ones
            coarse = tuple(
                "*" if i == pos else f"#{class_of[x]}" if i and class_of.get(x, -1) > order else x
                for i, x in enumerate(parts)
            )
            fid = fine_ids.setdefault(fine, len(fine_ids))
            cid = coarse_ids.setdefault(coarse, len(coarse_ids))
            cls.owner[bit] = (position[parts[pos]], fid, cid)
            cls.mask |= 1 << bit
        cls.bits = [[-1] * len(members) for _ in fine_ids]
        for bit, (m, fid, _cid) in cls.owner.items():
            cls.bits[fid][m] = bit
        # a true symmetry gives every member every fine template; anything else is left unreduced
        if any(b < 0 for row in cls.bits for b in row):
            return None
        return cls

    # ---------------------------------------------------------------- states
    def encode(self, state: Iterable[str]) -> int:
        s = 0
        index = self.index
        for f in state:
            i = index.get(f)
            if i is not None:
                s |= 1 << i
        return s

    def decode(self, s: int) -> frozenset[str]:
        return frozenset(self.facts[i] for i in range(s.bit_length()) if s >> i & 1)

    def canonical(self, s: int, touched: int = -1) -> int:
        """A representative of ``s``'s orbit, idempotent: classes are re-labelled in a fixed order, each
        sorting its members (stably) by their facts, with labels of classes re-labelled before it kept
        and later ones abstracted to their class. ``touched`` (the bits an operator changed) skips classes
        it misses until one is re-labelled, which gives the same result when ``s`` is one operator away
        from a canonical state."""
        force = False
        for cls in self.classes:
            if not force and not touched & cls.mask:
                continue
            x = s & cls.mask
            out = cls.memo.get(x)
            if out is None:
                out = self._relabel(cls, x)
                if len(cls.memo) < MEMO_LIMIT:
                    cls.memo[x] = out
            if out != x:
                s = (s & ~cls.mask) | out
                force = True
        return s

    @staticmethod
    def _relabel(cls: SymmetryClass, x: int) -> int:
        """The class's facts ``x`` with its members re-labelled in signature order (``x`` if unchanged)."""
        k = len(cls.members)
        sigs = [0] * k
        owner = cls.owner
        rest = x
        while rest:
            low = rest & -rest
            m, _fid, cid = owner[low.bit_length() - 1]
            sigs[m] |= 1 << cid
            rest ^= low
        order = sorted(range(k), key=sigs.__getitem__, reverse=True)
        if all(order[i] == i for i in range(k)):
            return x
        rank = [0] * k
        for r, m in enumerate(order):
            rank[m] = r
        bits = cls.bits
        out = 0
        rest = x
        while rest:
            low = rest & -rest
            m, fid, _cid = owner[low.bit_length() - 1]
            out |= 1 << bits[fid][rank[m]]
            rest ^= low
        return out

    def successors(self, s: int) -> list[tuple[int, int]]:
        """``(successor, changed bits)`` of every applicable operator, in operator-name order."""
        idx = list(self._no_pre)
        rest = s
        by_bit = self._by_bit
        while rest:
            low = rest & -rest
            found = by_bit.get(low.bit_length() - 1)
            if found:
                idx.extend(found)
            rest ^= low
        idx.sort()
        out = []
        ops = self.ops
        for i in idx:
            pre, add, dele, _name = ops[i]
            if s & pre == pre:
                out.append(((s & ~dele) | add, add | dele))
        return out

    def is_goal(self, s: int) -> bool:
        return s & self.goal == self.goal


@dataclass
class TableStats:
    states: int
    edges: int
    seconds: float
    complete: bool
    symmetry_classes: list[list[str]]


class ExactTable:
    """h* of every canonical state reachable from ``root`` (see the module docstring).

    ``lookup(state)`` gives h* (``math.inf`` for a dead end) or ``None`` when the state was not reached
    from the root (or the table was not built because the space exceeded ``max_states``).
    """

    def __init__(
        self,
        task: Any,
        root: Iterable[str],
        *,
        max_states: int = DEFAULT_MAX_STATES,
        symmetry: bool = True,
        deadline_s: float | None = None,
    ) -> None:
        start = time.perf_counter()
        self.bits = BitTask(task, symmetry=symmetry)
        self.index: dict[int, int] = {}
        self.dist: Any = None
        self.complete = self._build(
            self.bits.canonical(self.bits.encode(root)), max_states, None if deadline_s is None else start + deadline_s
        )
        n = len(self.index)
        self.stats = TableStats(
            states=n,
            edges=self._edges,
            seconds=round(time.perf_counter() - start, 3),
            complete=self.complete,
            symmetry_classes=[list(c.members) for c in self.bits.classes],
        )

    def _build(self, root: int, max_states: int, deadline: float | None) -> bool:
        import numpy as np

        bits = self.bits
        index = self.index
        index[root] = 0
        order: list[int] = [root]
        offsets = array("q", [0])
        targets = array("I")
        goal_ids = array("I")
        canonical, successors, is_goal = bits.canonical, bits.successors, bits.is_goal
        i = 0
        self._edges = 0
        while i < len(order):
            s = order[i]
            if is_goal(s):
                goal_ids.append(i)
            for nxt, touched in successors(s):
                c = canonical(nxt, touched)
                j = index.get(c)
                if j is None:
                    if len(order) >= max_states:
                        self.index = {}
                        return False
                    j = index[c] = len(order)
                    order.append(c)
                targets.append(j)
            offsets.append(len(targets))
            i += 1
            if deadline is not None and i % 4096 == 0 and time.perf_counter() > deadline:
                self.index = {}
                return False
        n = len(order)
        self._edges = len(targets)
        counts: np.ndarray = np.diff(np.frombuffer(offsets, dtype=np.int64))
        src = np.repeat(np.arange(n, dtype=np.int64), counts)
        dst = np.frombuffer(targets, dtype=np.uint32).astype(np.int64)
        # backward breadth-first search: reverse edges grouped by target (CSR), one frontier per level
        by_dst = np.argsort(dst, kind="stable")
        rsrc = src[by_dst]
        rstart = np.searchsorted(dst[by_dst], np.arange(n + 1))
        dist = np.full(n, -1, dtype=np.int32)
        frontier = np.frombuffer(goal_ids, dtype=np.uint32).astype(np.int64)
        dist[frontier] = 0
        level = 0
        while frontier.size:
            level += 1
            lo, hi = rstart[frontier], rstart[frontier + 1]
            lens = hi - lo
            if not lens.sum():
                break
            pos = np.repeat(lo - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
            preds = np.unique(rsrc[pos])
            preds = preds[dist[preds] < 0]
            dist[preds] = level
            frontier = preds
        self.dist = dist
        del src, dst, by_dst, rsrc, rstart
        return True

    def lookup(self, state: Iterable[str]) -> float | None:
        """h* of ``state`` (``math.inf``: goal unreachable), ``None`` when the table does not hold it."""
        if not self.complete:
            return None
        return self._h(self.bits.encode(state))

    def _h(self, s: int) -> float | None:
        j = self.index.get(self.bits.canonical(s))
        if j is None:
            return None
        d = int(self.dist[j])
        return math.inf if d < 0 else d

    def plan(self, state: Iterable[str]) -> list[str] | None:
        """An optimal plan from ``state`` (operator names): at each step the first operator, in name order,
        whose successor has h* one lower. ``None`` when h* is unknown or infinite."""
        s = self.bits.encode(state)
        h = self.lookup(state)
        if h is None or math.isinf(h):
            return None
        out: list[str] = []
        while h > 0:
            for pre, add, dele, name in self.bits.ops:
                if s & pre == pre:
                    nxt = (s & ~dele) | add
                    if self._h(nxt) == h - 1:
                        out.append(name)
                        s, h = nxt, h - 1
                        break
            else:  # cannot happen for a correct table
                raise AssertionError("no optimal successor found in the h* table")
        return out
