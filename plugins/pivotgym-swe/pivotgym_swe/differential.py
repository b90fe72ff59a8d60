"""A functional check stronger than the hidden tests: the changed function against the reference fix.

The hidden tests only see the inputs they were written for: a wrong fix they happen not to exercise, or an
object that compares equal to everything, passes them. This check runs, besides the tests,

* **a differential comparison** of the function the reference fix changes (the task's mutated function) with
  the reference on generated inputs: the arguments the task's own tests pass to it (recorded once by running
  those tests on the pristine tree; lambdas and helpers of the tests travel by value) plus their edge cases
  (other iterable kinds, empty and one-element containers, 0, 1, -1...) and type-directed mutations (ints
  shifted, strings cut, containers shortened, reordered, emptied, arguments dropped or repeated) drawn from a
  random stream seeded by a secret the host draws when it builds the reference and never writes anywhere a
  sandbox can read; every judgement asks all of them (up to :data:`MAX_INPUTS`). Each call's result is
  compared in canonical form: exact type names (an
  ``int`` is not a ``bool``, an always-equal object is not a ``list``), container contents with their element
  types, iterators drained up to a cap, exceptions by type, mutable arguments after the call, and what the call
  printed;
* **the docstring examples** of every function and class of the changed module (more-itertools runs its
  docstrings through a ``load_tests`` hook that pytest ignores), taken from the reference (pristine) source on
  the host, and for each docstring :data:`EXAMPLE_VARIANTS` copies of its examples with their number and
  sequence literals changed by the same secret stream. The expected outcome of every example, original or
  changed, is what the reference printed or raised when the host ran it, never the text written in the
  docstring.

**Where the verdict is made.** Only on the host. The candidate's code runs in the sandbox under
:mod:`pivotgym_swe.diff_harness`, which prints one bounded line per call and example; the same harness runs on
the pristine tree (the reference fix) in separate sandboxed processes, and its lines are cached on the host, in
a directory every sandboxed command of the task has hidden. The candidate's process never sees the reference
source or its outputs; it sees only the inputs of its own run, which it could not predict. Code under test may
rewrite the harness and print anything, but a line that does not carry the outcome the reference produced, a
missing line, a duplicate or a malformed one is a mismatch. What it cannot reach is what it would have to print
to be credited: reproducing the reference's outcomes on inputs drawn from a secret takes a correct fix.

Limits, stated plainly: an original docstring example's expected output is written in the repository, so code
written against this check could print it (those examples only add requirements; the changed copies are the
oracle it cannot read); only module-level functions get generated calls (a mutated method has its tests and the
docstring examples, original and changed); an input or example whose reference outcome is not reproducible
(two reference runs differ, or a call takes longer than ``per_call_seconds``) is dropped; objects of types
without a canonical form are compared by type name and ``repr`` with memory addresses masked.
"""

from __future__ import annotations

import ast
import copy
import doctest
import hashlib
import json
import os
import random
import re
import secrets
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.errors import SandboxError
from pivotgym.sandbox import Limits, Sandbox, fork_dir, get_sandbox, remove_dir
from pivotgym_swe.confine import prelude
from pivotgym_swe.leaks import answer_paths, package_names
from pivotgym_swe.limits import JUDGE_LIMITS, RUNNER_ENV
from pivotgym_swe.mutate import Mutation
from pivotgym_swe.runtime import RuntimeBuildError, runtime_for, sandbox_for
from pivotgym_swe.sources import SourceError, cache_root, tree_for

#: the harness's text: the kernel-level confinement's definitions first (:mod:`pivotgym_swe.confine`), then the
#: harness, which confines itself once its alarm handler is installed
HARNESS = prelude(call=False) + Path(__file__).with_name("diff_harness.py").read_text(encoding="utf-8")
#: bump when the input generation or the comparison changes, so cached references are rebuilt
VERSION = "6"
DIFF_LIMITS = JUDGE_LIMITS.with_(wall_seconds=90, cpu_seconds=90, output_bytes=4 << 20)
MAX_SEEDS = 40
#: generated calls of a reference (from the task's recorded calls and a secret seed), all asked each judgement
MAX_INPUTS = 400
MAX_EXAMPLES = 400
#: literal-changed copies of each docstring's examples, and at most this many changed examples in all
EXAMPLE_VARIANTS = 2
MAX_CHANGED_EXAMPLES = 400
MAX_LINE = 70000
PER_CALL_SECONDS = 2.0
#: a reference call slower than this (ms, call and drain together) is dropped: a candidate gets
#: ``PER_CALL_SECONDS`` for it, and a near-limit input would make the verdict depend on the host's load
SLOW_MS = 100
MUTABLE_SPECS = ("list", "dict", "set", "iter", "ordereddict", "counter", "defaultdict")


@dataclass
class DifferentialResult:
    """The outcome of :func:`check_differential`.

    ``ok`` is False when any generated call or docstring example disagrees with the reference. ``infra`` is
    True when the check could not run for a reason that is not the candidate's (the reference run failed, the
    sandbox refused to start): the caller should report a failed verification, not a wrong fix."""

    ok: bool
    reason: str
    details: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    infra: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reference:
    """Everything the host keeps about one task's reference: the inputs, the examples, the reference digests."""

    module: str
    targets: list[str]
    inputs: list[dict[str, Any]]
    digests: dict[str, str]
    examples: list[dict[str, Any]]  # groups sent to the harness: {"name", "examples": [{"id", "source"}]}
    expected: dict[str, dict[str, Any]]  # example id -> the reference's outcome {"got", "exc", "source"}
    seeds: int = 0
    dropped: int = 0
    error: str = ""


# ---------------------------------------------------------------------------------------------- helpers
def module_name(path: str) -> str:
    """``toolz/dicttoolz.py`` -> ``toolz.dicttoolz``; ``pkg/__init__.py`` -> ``pkg``."""
    parts = Path(path).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_functions(text: str) -> set[str]:
    """Names of the module-level functions of a source text (empty when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def extract_examples(text: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The docstring examples of a module's source: groups for the harness and the expectations for the host.

    Every docstring (module, classes, functions, methods) is one group; its examples share a namespace, as in
    ``doctest``. Examples marked ``+SKIP`` are left out."""
    tree = ast.parse(text)
    parser = doctest.DocTestParser()
    groups: list[dict[str, Any]] = []
    expected: dict[str, dict[str, Any]] = {}
    total = 0

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal total
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix if isinstance(node, ast.Module) else f"{prefix}.{node.name}".lstrip(".")
            doc = ast.get_docstring(node, clean=False)
            if doc and ">>>" in doc:
                try:
                    examples = parser.get_examples(doc, name)
                except ValueError:  # a malformed example: doctest would fail the whole docstring
                    examples = []
                items = []
                for i, ex in enumerate(examples):
                    if ex.options.get(doctest.SKIP) or total >= MAX_EXAMPLES:
                        continue
                    flags = sum(flag for flag, on in ex.options.items() if on)
                    ident = f"{name or '<module>'}#{i}"
                    items.append({"id": ident, "source": ex.source})
                    expected[ident] = {"want": ex.want, "exc_msg": ex.exc_msg, "flags": flags, "source": ex.source}
                    total += 1
                if items:
                    groups.append({"name": name, "examples": items})
            for child in getattr(node, "body", []):
                visit(child, name if not isinstance(node, ast.Module) else "")

    visit(tree, "")
    return groups, expected


class _LiteralChanger(ast.NodeTransformer):
    """Changes int literals (shifted by a small step) and literal lists and tuples (one element dropped, or
    reversed), each with probability one half, from ``rng``; ``changed`` counts what it changed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.changed = 0

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is int and self.rng.random() < 0.5:
            self.changed += 1
            return ast.copy_location(ast.Constant(node.value + self.rng.choice((-2, -1, 1, 2, 3))), node)
        return node

    def _sequence(self, node: ast.List | ast.Tuple) -> ast.AST:
        self.generic_visit(node)
        if len(node.elts) > 1 and all(isinstance(e, ast.Constant) for e in node.elts) and self.rng.random() < 0.5:
            self.changed += 1
            if self.rng.random() < 0.5:
                del node.elts[self.rng.randrange(len(node.elts))]
            else:
                node.elts.reverse()
        return node

    visit_List = _sequence
    visit_Tuple = _sequence


def changed_examples(groups: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """:data:`EXAMPLE_VARIANTS` copies of each docstring's examples with their literals changed from ``rng``
    (:class:`_LiteralChanger`), at most :data:`MAX_CHANGED_EXAMPLES` examples in all. A copy keeps its
    group's order and shared namespace; a copy in which nothing changed is left out. Ids and names get a
    ``~N`` suffix."""
    out: list[dict[str, Any]] = []
    total = 0
    for variant in range(1, EXAMPLE_VARIANTS + 1):
        for group in groups:
            changer = _LiteralChanger(rng)
            items = []
            for ex in group["examples"]:
                try:
                    source = ast.unparse(changer.visit(ast.parse(ex["source"]))) + "\n"
                except (SyntaxError, ValueError, RecursionError):
                    source = ex["source"]
                items.append({"id": f"{ex['id']}~{variant}", "source": source})
            if changer.changed and total + len(items) <= MAX_CHANGED_EXAMPLES:
                out.append({"name": f"{group['name']}~{variant}", "examples": items})
                total += len(items)
    return out


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


def example_outcome(record: dict[str, Any], source: str = "") -> dict[str, Any]:
    """An example's outcome as the host compares it: what it printed and the exception line it raised, with
    memory addresses masked (they differ between processes)."""
    exc = record.get("exc")
    return {
        "got": _ADDRESS.sub("0x?", str(record.get("got", ""))),
        "exc": None if exc is None else _ADDRESS.sub("0x?", str(exc)),
        "source": source,
    }


def same_outcome(expect: dict[str, Any], record: dict[str, Any]) -> bool:
    """Whether a harness record of an example shows the reference's outcome ``expect``."""
    got = example_outcome(record)
    return got["got"] == expect["got"] and got["exc"] == expect["exc"]


def example_passes(expect: dict[str, Any], got: str, exc: str | None) -> bool:
    """``doctest``'s own decision for one example, from what the harness says it printed or raised."""
    checker = doctest.OutputChecker()
    flags = int(expect["flags"])
    if exc is None:
        return expect["exc_msg"] is None and checker.check_output(expect["want"], got, flags)
    if expect["exc_msg"] is None or exc == "<timeout>":
        return False
    if checker.check_output(expect["exc_msg"], exc, flags):
        return True
    if flags & doctest.IGNORE_EXCEPTION_DETAIL:
        return _exc_type(expect["exc_msg"]) == _exc_type(exc)
    return False


def _exc_type(line: str) -> str:
    head = line.split(":", 1)[0].strip()
    return head.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------------- inputs
def _nodes(spec: dict[str, Any], hashable: bool = False) -> list[tuple[dict[str, Any], bool]]:
    """Every node of a value spec (containers included) with whether it must stay hashable (inside a set)."""
    out = [(spec, hashable)]
    t = spec.get("t")
    v: Any = spec.get("v")
    if t in ("list", "tuple", "set", "frozenset", "iter"):
        for child in v:
            out += _nodes(child, hashable or t in ("set", "frozenset"))
    elif t in ("dict", "ordereddict", "counter", "defaultdict"):
        for _key, child in v:
            out += _nodes(child, hashable)
    return out


def _mutate_int(v: int, rng: random.Random) -> int:
    if abs(v) > 10**6:
        return v + rng.choice((-1, 1))
    small = rng.choice((-1, 0, 1, 2))  # the boundaries where off-by-one bugs live
    return rng.choice((v + 1, v - 1, small, small, -v, 2 * v, v + rng.randint(-5, 5), rng.randint(-20, 20)))


def _mutate_str(v: str, rng: random.Random) -> str:
    options = ["", v[::-1], v + v[:1], v[1:], v[:-1], v + "a", v.swapcase(), "".join(rng.sample(v, len(v)))]
    return rng.choice(options)


def _mutate_node(node: dict[str, Any], rng: random.Random, hashable: bool) -> bool:
    """Change one node in place by its type; False when this node has no mutation."""
    t = node["t"]
    v: Any = node.get("v")
    if t == "int":
        node["v"] = str(_mutate_int(int(v), rng))
    elif t == "bool":
        node["v"] = not v
    elif t == "float":
        x = float(v)
        node["v"] = repr(rng.choice((x + 0.5, -x, 2 * x, 0.0, x - 1.0)))
    elif t == "str":
        node["v"] = _mutate_str(v, rng)
    elif t == "bytes":
        raw = bytes.fromhex(v)
        node["v"] = rng.choice((b"", raw[::-1], raw[1:], raw + raw[:1])).hex()
    elif t == "range":
        start, stop, step = v
        node["v"] = rng.choice(([start, stop + 1, step], [start, max(start, stop - 1), step], [start + 1, stop, step]))
    elif t in ("list", "tuple", "iter") and not (hashable and t == "list"):
        items = list(v)
        choice = rng.randrange(6)
        if choice == 5:  # another kind of iterable: a sequence without len() or an iterator without indexing
            kinds = ["tuple"] if hashable else [k for k in ("list", "tuple", "iter") if k != t]
            node["t"] = rng.choice(kinds)
            return node["t"] != t
        if choice == 0 and items:
            del items[rng.randrange(len(items))]
        elif choice == 1 and items:
            items.insert(rng.randrange(len(items) + 1), copy.deepcopy(rng.choice(items)))
        elif choice == 2:
            items.reverse()
        elif choice == 3:
            rng.shuffle(items)
        else:
            items = []
        node["v"] = items
    elif t in ("set", "frozenset") and v:
        items = list(v)
        del items[rng.randrange(len(items))]
        node["v"] = items
    elif t in ("dict", "ordereddict", "counter", "defaultdict") and v:
        items = list(v)
        if rng.random() < 0.5:
            del items[rng.randrange(len(items))]
        else:
            key, value = copy.deepcopy(rng.choice(items))
            if key["t"] in ("int", "str"):
                _mutate_node(key, rng, True)
                if all(k != key for k, _ in items):
                    items.append([key, value])
        node["v"] = items
    else:
        return False
    return True


def mutate_call(call: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """A copy of a recorded call with one value node changed by its type (None when nothing can change)."""
    new = copy.deepcopy(call)
    slots = [("a", i) for i in range(len(new["args"]))] + [("k", k) for k in sorted(new["kwargs"])]
    if not slots:
        return None
    if rng.random() < 0.15:  # the argument list itself: one fewer, or one repeated (other arities)
        if new["args"] and rng.random() < 0.5:
            del new["args"][rng.randrange(len(new["args"]))]
        elif new["kwargs"] and rng.random() < 0.5:
            del new["kwargs"][rng.choice(sorted(new["kwargs"]))]
        elif new["args"]:
            new["args"].append(copy.deepcopy(rng.choice(new["args"])))
        return new
    for _ in range(8):
        kind, key = rng.choice(slots)
        root = new["args"][key] if kind == "a" else new["kwargs"][key]
        node, hashable = rng.choice(_nodes(root))
        if _mutate_node(node, rng, hashable):
            return new
    return None


def _argument_variants(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The edge cases of one argument by its type: the other kinds of an iterable (a sequence without
    ``len()``, an iterator without indexing), empty and single-element containers, ints at 0, 1, -1 and one
    step away, empty and one-character strings."""
    t = spec["t"]
    v: Any = spec.get("v")
    out: list[dict[str, Any]] = []
    if t in ("list", "tuple", "iter"):
        out += [{"t": kind, "v": v} for kind in ("list", "tuple", "iter") if kind != t]
        out += [{"t": t, "v": []}] + ([{"t": t, "v": v[:1]}] if len(v) > 1 else [])
    elif t in ("set", "frozenset") and v:
        out += [{"t": t, "v": []}, {"t": t, "v": v[:1]}]
    elif t in ("dict", "ordereddict", "counter", "defaultdict") and v:
        out += [{**spec, "v": []}, {**spec, "v": v[:1]}]
    elif t == "int":
        n = int(v)
        out += [{"t": "int", "v": str(x)} for x in dict.fromkeys((0, 1, -1, n + 1, n - 1)) if x != n]
    elif t == "str" and v:
        out += [{"t": "str", "v": ""}, {"t": "str", "v": v[:1]}]
    return out


def systematic_variants(call: dict[str, Any]) -> list[dict[str, Any]]:
    """Copies of a recorded call with one argument replaced by each of its edge cases (see
    :func:`_argument_variants`), argument by argument."""
    out = []
    for i, spec in enumerate(call["args"]):
        for variant in _argument_variants(spec):
            new = copy.deepcopy(call)
            new["args"][i] = variant
            out.append(new)
    for key, spec in sorted(call["kwargs"].items()):
        for variant in _argument_variants(spec):
            new = copy.deepcopy(call)
            new["kwargs"][key] = variant
            out.append(new)
    return out


def generate_inputs(seeds: list[dict[str, Any]], salt: str, total: int = MAX_INPUTS) -> list[dict[str, Any]]:
    """The seeds (at most :data:`MAX_SEEDS`, spread over the recorded calls), their systematic edge-case
    variants (:func:`systematic_variants`, up to 60 % of ``total``) and seeded random mutations up to
    ``total`` distinct calls, each with an ``id`` and its ``origin`` (``tests`` or ``mutated``). Same seeds and
    salt, same inputs."""
    rng = random.Random(f"pivotgym-differential:{salt}")
    chosen = list(seeds)
    if len(chosen) > MAX_SEEDS:  # half the simplest calls (small values, edge cases), half a random spread
        order = sorted(range(len(chosen)), key=lambda i: (len(json.dumps(chosen[i], sort_keys=True)), i))
        keep = set(order[: MAX_SEEDS // 2])
        keep |= set(rng.sample(order[MAX_SEEDS // 2 :], MAX_SEEDS - len(keep)))
        chosen = [chosen[i] for i in sorted(keep)]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(call: dict[str, Any], origin: str) -> None:
        key = json.dumps([call["target"], call["args"], call["kwargs"]], sort_keys=True)
        if key not in seen and len(key) <= 20000:
            seen.add(key)
            out.append({"id": str(len(out)), "origin": origin, **call})

    for call in chosen:
        add(call, "tests")
    variants = [systematic_variants(call) for call in chosen]
    for round_ in range(max((len(v) for v in variants), default=0)):  # round-robin: every seed gets its turn
        for per_seed in variants:
            if round_ < len(per_seed) and len(out) < total * 0.6:
                add(per_seed[round_], "mutated")
    tries = 0
    while chosen and len(out) < total and tries < total * 10:
        tries += 1
        mutated = mutate_call(rng.choice(chosen), rng)
        if mutated is not None and rng.random() < 0.3:
            mutated = mutate_call(mutated, rng) or mutated
        if mutated is not None:
            add(mutated, "mutated")
    return out


# ---------------------------------------------------------------------------------------------- running
@dataclass
class HarnessRun:
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    docs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seeds: list[dict[str, Any]] = field(default_factory=list)
    import_error: str = ""
    ended: bool = False
    malformed: int = 0
    error: str = ""


def parse_lines(stdout: str, nonce: str) -> HarnessRun:
    """The harness's records, read defensively: lines without the nonce are noise; a malformed line after the
    nonce is counted (and, for the candidate, makes the comparison fail)."""
    run = HarnessRun()
    for line in stdout.splitlines():
        head, tab, body = line.partition("\t")
        if not tab or head != nonce:
            continue
        if len(body) > MAX_LINE:
            run.malformed += 1
            continue
        try:
            record = json.loads(body)
        except (ValueError, RecursionError):
            run.malformed += 1
            continue
        if not isinstance(record, dict):
            run.malformed += 1
            continue
        kind = record.get("k")
        if kind == "call" and isinstance(record.get("id"), str) and isinstance(record.get("h"), str):
            run.calls.setdefault(record["id"], []).append(record)
        elif kind == "doc" and isinstance(record.get("id"), str) and isinstance(record.get("got"), str):
            exc = record.get("exc")
            if exc is not None and not isinstance(exc, str):
                run.malformed += 1
                continue
            run.docs.setdefault(record["id"], []).append(record)
        elif kind == "seed" and isinstance(record.get("target"), str):
            if isinstance(record.get("args"), list) and isinstance(record.get("kwargs"), dict):
                run.seeds.append({"target": record["target"], "args": record["args"], "kwargs": record["kwargs"]})
        elif kind == "import_error":
            run.import_error = str(record.get("error", "?"))[:200]
        elif kind == "end":
            run.ended = True
        else:
            run.malformed += 1
    return run


def run_harness(
    tree: Path,
    payload: dict[str, Any],
    *,
    sandbox: Sandbox,
    hide: tuple[str, ...],
    limits: Limits = DIFF_LIMITS,
    python: str | None = None,
) -> HarnessRun:
    """Run the harness on a private fork of ``tree`` (never on ``tree`` itself) and parse its lines."""
    scratch = Path(tempfile.mkdtemp(prefix="pivotgym-diff-"))
    nonce = secrets.token_hex(16)
    try:
        try:
            work = fork_dir(tree, scratch / "repo")
        except OSError as exc:
            return HarnessRun(error=f"the repository could not be copied: {str(exc)[:200]}")
        root = "/repo" if sandbox.name in ("bwrap", "docker") else str(work)
        body = json.dumps({**payload, "nonce": nonce, "root": root, "per_call_seconds": PER_CALL_SECONDS})
        # not -I: it implies -E, and string hashing must be seeded (PYTHONHASHSEED) for set and dict orders to be
        # the same in the reference's and the candidate's process; the environment is the sandbox's own anyway
        argv = [python or sys.executable, "-s", "-P", "-B", "-c", HARNESS]
        try:
            env = {**RUNNER_ENV, "PYTHONHASHSEED": "0"}
            result = sandbox.run(argv, work, limits=limits, stdin=body, env=env, hide=hide)
        except (SandboxError, OSError) as exc:
            return HarnessRun(error=f"the sandbox could not run the harness: {str(exc)[:200]}")
    finally:
        remove_dir(scratch)
    run = parse_lines(result.stdout, nonce)
    if result.timed_out:
        run.error = "timed out"
    elif result.limit_hit:
        run.error = result.limit_message or result.limit_hit
    elif not run.ended:
        run.error = f"the harness did not finish (exit {result.returncode}): {result.stderr[-300:]}"
    return run


# ---------------------------------------------------------------------------------------------- reference
def _cache_key(instance: dict[str, Any], pristine: Path) -> str:
    """What a reference depends on: this code, the interpreter, the task, and the content of the reference
    module and the task's test files (so two trees under one source spec never share an entry)."""
    contents = []
    for rel in [instance["mutation"]["path"], *instance.get("test_files", [])]:
        try:
            contents.append(hashlib.sha256((pristine / rel).read_bytes()).hexdigest())
        except OSError:
            contents.append("")
    blob = json.dumps(
        [
            VERSION,
            HARNESS,
            sys.version,
            instance.get("source"),
            instance.get("mutation"),
            instance.get("fix"),
            contents,
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def target_functions(instance: dict[str, Any], reference_text: str) -> list[str]:
    """The module-level functions the reference fix changes (the mutated function, when it is one)."""
    name = Mutation(**instance["mutation"]).function
    return [name] if name in module_functions(reference_text) else []


_MEMORY: dict[str, Reference] = {}


def reference_for(
    instance: dict[str, Any],
    *,
    sandbox: Sandbox | None = None,
    python: str | None = None,
    pristine: Path | None = None,
    refresh: bool = False,
) -> Reference:
    """The task's reference (inputs, examples, reference digests), built once and cached on the host.

    Built from the pristine tree, which is the tree with the reference fix applied: record the arguments the
    task's tests pass to the target function, generate inputs from them, run the harness twice on the
    pristine tree and keep the inputs and examples whose reference outcome is reproducible. ``pristine``: the
    task's clean tree (default: the one its ``source`` names, :func:`pivotgym_swe.sources.tree_for`)."""
    pristine = Path(pristine) if pristine is not None else tree_for(instance["source"])
    key = _cache_key(instance, pristine)
    if not refresh and key in _MEMORY:
        return _MEMORY[key]
    path = cache_root() / "differential" / f"{key}.json"
    if not refresh and path.is_file():
        try:
            ref = Reference(**json.loads(path.read_text()))
            _MEMORY[key] = ref
            return ref
        except (ValueError, TypeError):
            pass
    sandbox, python, hide = setup(instance, sandbox, python)
    ref = _build_reference(instance, pristine, sandbox, python, hide)
    if not ref.error:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(ref)))
        os.replace(tmp, path)
        _MEMORY[key] = ref
    return ref


def setup(
    instance: dict[str, Any], sandbox: Sandbox | None, python: str | None
) -> tuple[Sandbox, str, tuple[str, ...]]:
    """(sandbox, interpreter, hidden paths) for harness runs of a task: the sandbox set up for the task
    source's allow-listed runtime (:mod:`pivotgym_swe.runtime`, as the env's commands and the judge run) and
    every answer copy still visible there hidden. An explicit ``python`` is kept."""
    source = instance.get("source")
    runtime = runtime_for(source)
    sandbox = sandbox_for(runtime, sandbox or get_sandbox())
    hide = answer_paths(source, python_roots=getattr(sandbox, "python_roots", None))
    return sandbox, python or runtime.python_for(sandbox), hide


def _build_reference(
    instance: dict[str, Any], pristine: Path, sandbox: Sandbox, python: str, hide: tuple[str, ...]
) -> Reference:
    module_path = instance["mutation"]["path"]
    text = (pristine / module_path).read_text(encoding="utf-8")
    module = module_name(module_path)
    targets = target_functions(instance, text)
    groups, expected = extract_examples(text)
    packages = list(package_names(instance.get("source") or {})) or [module.split(".")[0]]
    ref = Reference(module, targets, [], {}, groups, expected)
    seeds: list[dict[str, Any]] = []
    if targets:
        recorded = run_harness(
            pristine,
            {
                "mode": "record",
                "module": module,
                "targets": targets,
                "tests": list(instance.get("test_files", [])),
                "examples": groups,
                "packages": packages,
            },
            sandbox=sandbox,
            hide=hide,
            python=python,
        )
        if recorded.error:
            ref.error = f"recording the tests' calls failed: {recorded.error}"
            return ref
        seeds = recorded.seeds
    ref.seeds = len(seeds)
    # the secret: drawn here, used for this pool and these changed examples, kept nowhere
    rng = random.Random(f"pivotgym-differential-examples:{secrets.token_hex(16)}")
    inputs = generate_inputs(seeds, secrets.token_hex(16))
    examples = groups + changed_examples(groups, rng)
    payload = {"mode": "run", "module": module, "inputs": inputs, "examples": examples, "packages": packages}
    runs = [run_harness(pristine, payload, sandbox=sandbox, hide=hide, python=python) for _ in range(2)]
    for run in runs:
        if run.error or run.import_error:
            ref.error = f"the reference run failed: {run.error or run.import_error}"
            return ref
    kept = []
    for item in inputs:
        records = [run.calls.get(item["id"], []) for run in runs]
        if all(len(r) == 1 for r in records) and records[0][0]["h"] == records[1][0]["h"]:
            if not _slow(records) and records[0][0].get("p") not in ("timeout", '["timeout"]', "harness error"):
                kept.append(item)
                ref.digests[item["id"]] = records[0][0]["h"]
    ref.dropped = len(inputs) - len(kept)
    ref.inputs = kept
    good = set()
    for group in examples:
        for ex in group["examples"]:
            records = [run.docs.get(ex["id"], []) for run in runs]
            if not all(len(r) == 1 for r in records) or _slow(records):
                continue
            first, second = (example_outcome(r[0]) for r in records)
            if first != second or first["exc"] == "<timeout>":
                continue
            original = expected.get(ex["id"])  # an original example counts only where doctest passes it
            if original is not None and not example_passes(original, records[0][0]["got"], records[0][0].get("exc")):
                continue
            good.add(ex["id"])
    ref.examples = _keep_groups(examples, good)
    ref.expected = {
        ex["id"]: example_outcome(runs[0].docs[ex["id"]][0], ex["source"])
        for group in ref.examples
        for ex in group["examples"]
    }
    return ref


def _slow(records: list[list[dict[str, Any]]]) -> bool:
    """Whether a reference outcome took longer than :data:`SLOW_MS` (or did not say) in either run."""
    return any(not isinstance(r[0].get("ms"), int) or r[0]["ms"] > SLOW_MS for r in records)


def _keep_groups(groups: list[dict[str, Any]], good: set[str]) -> list[dict[str, Any]]:
    """Groups whose every example passed on the reference (a group shares state, so one failure drops it)."""
    return [g for g in groups if all(ex["id"] in good for ex in g["examples"])]


# ---------------------------------------------------------------------------------------------- the check
def check_differential(
    fork: Path,
    instance: dict[str, Any],
    *,
    sandbox: Sandbox | None = None,
    python: str | None = None,
    pristine: Path | None = None,
    limits: Limits = DIFF_LIMITS,
) -> DifferentialResult:
    """Compare the repository state ``fork`` with the task's reference fix (see the module docstring).

    ``fork`` is only read: the harness runs on a private copy of it, in ``sandbox`` (default: the configured
    backend), with every host copy of the task's answer hidden. The reference outputs stay on the host.
    ``pristine`` is the task's clean tree (default: the one its ``source`` names; pass the judge's own)."""
    try:
        sandbox, python, hide = setup(instance, sandbox, python)
        ref = reference_for(instance, sandbox=sandbox, python=python, pristine=pristine)
    except (OSError, ValueError, SyntaxError, KeyError, RuntimeBuildError, SourceError) as exc:
        return DifferentialResult(False, f"differential: the reference could not be built ({exc})"[:300], infra=True)
    if ref.error:
        return DifferentialResult(False, f"differential: {ref.error}"[:300], infra=True)
    counts = {"inputs": len(ref.inputs), "seeds": ref.seeds, "examples": len(ref.expected)}
    if not ref.inputs and not ref.expected:
        return DifferentialResult(True, "differential: nothing to compare", counts=counts)
    payload = candidate_payload(ref, instance)
    run = run_harness(Path(fork), payload, sandbox=sandbox, hide=hide, limits=limits, python=python)
    return compare(ref, run, counts)


def candidate_payload(ref: Reference, instance: dict[str, Any]) -> dict[str, Any]:
    """What the candidate's process is told: the module, the inputs, the example sources. Never a reference
    digest, an expected outcome or the reference source."""
    return {
        "mode": "run",
        "module": ref.module,
        "inputs": [{k: item[k] for k in ("id", "target", "args", "kwargs")} for item in ref.inputs],
        "examples": [
            {"name": g["name"], "examples": [{"id": ex["id"], "source": ex["source"]} for ex in g["examples"]]}
            for g in ref.examples
        ],
        "packages": list(package_names(instance.get("source") or {})) or [ref.module.split(".")[0]],
    }


def compare(ref: Reference, run: HarnessRun, counts: dict[str, int]) -> DifferentialResult:
    """The host's verdict: every reference digest and every kept example's reference outcome must be matched
    exactly once."""
    details: list[dict[str, Any]] = []
    call_misses = doc_misses = 0
    for item in ref.inputs:
        records = run.calls.get(item["id"], [])
        if len(records) != 1 or records[0]["h"] != ref.digests[item["id"]]:
            call_misses += 1
            if len(details) < 5:
                got = "missing" if not records else "duplicated" if len(records) > 1 else str(records[0].get("p"))
                details.append({"kind": "call", "call": describe_call(item), "got": got[:300]})
    for ident, expect in ref.expected.items():
        records = run.docs.get(ident, [])
        if len(records) != 1 or not same_outcome(expect, records[0]):
            doc_misses += 1
            if len(details) < 10:
                got = "missing" if len(records) != 1 else (records[0].get("exc") or records[0]["got"])
                details.append({"kind": "example", "example": expect["source"].strip()[:300], "got": str(got)[:300]})
    counts = {**counts, "call_mismatches": call_misses, "example_failures": doc_misses, "malformed": run.malformed}
    problems = []
    if run.import_error:
        problems.append(f"the module does not import ({run.import_error})")
    if run.error:
        problems.append(run.error[:200])
    if run.malformed:
        problems.append(f"{run.malformed} malformed records")
    if call_misses:
        problems.append(f"{call_misses} of {len(ref.inputs)} generated calls differ from the reference fix")
    if doc_misses:
        problems.append(f"{doc_misses} of {len(ref.expected)} docstring examples differ from the reference fix")
    if problems:
        return DifferentialResult(False, "differential: " + "; ".join(problems), details, counts)
    return DifferentialResult(
        True, f"differential: {len(ref.inputs)} calls and {len(ref.expected)} examples agree", details, counts
    )


def describe_call(item: dict[str, Any]) -> str:
    """A short Python-like rendering of a generated call, for messages."""
    args = [render_spec(s) for s in item["args"]] + [f"{k}={render_spec(s)}" for k, s in item["kwargs"].items()]
    return f"{item['target']}({', '.join(args)})"[:300]


def render_spec(spec: dict[str, Any]) -> str:
    t = spec.get("t")
    v: Any = spec.get("v")
    if t == "none":
        return "None"
    if t in ("int", "float", "complex"):
        return str(v)
    if t == "bool":
        return repr(bool(v))
    if t == "str":
        return repr(v)
    if t == "bytes":
        return repr(bytes.fromhex(v))
    if t in ("list", "tuple", "set", "frozenset", "iter"):
        inner = ", ".join(render_spec(x) for x in v[:8]) + (", ..." if len(v) > 8 else "")
        return {
            "list": "[{}]",
            "tuple": "({})",
            "set": "{{{}}}",
            "frozenset": "frozenset({{{}}})",
            "iter": "iter([{}])",
        }[t].format(inner)
    if t in ("dict", "ordereddict", "counter", "defaultdict"):
        return "{" + ", ".join(f"{render_spec(k)}: {render_spec(x)}" for k, x in v[:8]) + "}"
    if t == "range":
        return f"range({', '.join(map(str, v))})"
    if t == "ref":
        return str(v).replace(":", ".")
    return "?"
