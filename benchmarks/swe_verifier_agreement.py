"""Agreement of the SWE judge with labelled candidate fixes: hidden tests alone vs tests + differential check.

For each shipped task (default: the test splits of toolz, more-itertools and humanevalfix) candidates are
built from the reference (pristine) function (:mod:`pivotgym_swe.rewrites`) and labelled *without* the
verifier:

* ``rewrite``: semantics-preserving AST rewrites of the reference fix (rename locals, if/else swap under a
  negated test, extract variable, De Morgan, return if/else -> conditional expression, loop <->
  comprehension) - **correct by construction**;
* ``original_bug``: the task's own bug - **wrong by construction** (its FAIL_TO_PASS tests fail);
* ``forgery``: the function returns an object equal to everything - **wrong by construction**;
* ``mutant``: another single mutation of the reference function - **wrong when it fails a hidden test**
  (certain: the reference passes them all; this makes the tests' own false negatives 0 by construction),
  otherwise labelled by **independent random testing**: ``--label-inputs`` calls (default 400) drawn from
  the *types* of the tests' arguments by a generator of this script's own (fresh random values and sizes,
  scalars recombined from the tests' own values, another seed), run on the mutant and on the reference in
  separate sandboxed processes and compared by ``type`` + ``repr`` (iterators drained), not by the
  verifier's canonical digests. Any difference: wrong; none: correct (an equivalent mutant). A mutant the
  labeller cannot exercise (no drawable argument types) is left out and counted. The labeller also judges
  the candidates labelled by construction; its agreement with them is printed as a check on it.

Each candidate is judged by the hidden tests alone (``judge()``, its differential layer off where it has
one) and by tests + docstring examples + differential (``judge()`` and
:func:`pivotgym_swe.differential.check_differential`). Printed: agreement (verdict == label) with a 95 %
Wilson interval, false positives (wrong credited) and false negatives (correct rejected), per verifier, per
kind of candidate, and the floors of constant verdicts (reject-all = share of wrong candidates, credit-all =
share of correct ones).

    .venv/bin/python benchmarks/swe_verifier_agreement.py [--json] [--sets toolz,more-itertools,humanevalfix]
        [--split test] [--limit N] [--rewrites 4] [--mutants 5] [--label-inputs 400] [--out report.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import secrets
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("PIVOTGYM_LOAD_PLUGINS", "swe")

from _smoke import parse_args

from pivotgym.eval.stats import agreement, wilson
from pivotgym.sandbox import Sandbox, fork_dir, get_sandbox, remove_dir
from pivotgym_swe.differential import check_differential, reference_for, setup
from pivotgym_swe.mutate import Mutation
from pivotgym_swe.rewrites import always_equal, equivalent_rewrites, wrong_fixes
from pivotgym_swe.tasks import load_task_set, pristine_tree, task_file
from pivotgym_swe.testing import JUDGE_LIMITS, judge

# ------------------------------------------------------------------------------------------- the labeller
LABELLER = r"""
import itertools, json, signal, sys, os
payload = json.loads(sys.stdin.read())
out = os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1); os.dup2(null, 2)
sys.path.insert(0, os.getcwd())
class Slow(BaseException):
    pass
def alarm(*_):
    raise Slow()
signal.signal(signal.SIGALRM, alarm)
def show(v, depth=0):
    t = type(v)
    if depth > 6:
        return t.__qualname__ + ":..."
    if t in (list, tuple):
        return t.__qualname__ + "[" + ", ".join(show(x, depth + 1) for x in v) + "]"
    if t in (set, frozenset):
        return t.__qualname__ + "{" + ", ".join(sorted(show(x, depth + 1) for x in v)) + "}"
    if isinstance(v, dict):
        items = sorted((show(k, depth + 1), show(x, depth + 1)) for k, x in v.items())
        return t.__qualname__ + "{" + ", ".join(a + ": " + b for a, b in items) + "}"
    if hasattr(v, "__next__") or t.__module__ == "itertools":
        return "iterator[" + ", ".join(show(x, depth + 1) for x in itertools.islice(v, 1000)) + "]"
    return t.__qualname__ + ":" + repr(v)
results = []
import random
try:
    module = __import__(payload["module"], fromlist=["_"])
    namespace = {payload["target"]: getattr(module, payload["target"])}
except BaseException as exc:
    namespace = None
    results = ["import " + type(exc).__name__] * len(payload["calls"])
for call in payload["calls"] if namespace is not None else []:
    random.seed(12345)  # a function that draws random numbers draws the same ones in both processes
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        results.append(show(eval(call, dict(namespace))))
    except Slow:
        results.append("<slow>")
    except BaseException as exc:
        results.append("raise " + type(exc).__name__)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
os.write(out, (payload["nonce"] + json.dumps(results) + "\n").encode())
"""


def shape(spec: dict[str, Any]) -> Any:
    """The type shape of a recorded argument (its values are forgotten)."""
    t = spec["t"]
    v: Any = spec.get("v")
    if t in ("list", "set", "frozenset", "iter"):
        return (t, shape(v[0]) if v else ("int",))
    if t == "tuple":
        shapes = [shape(x) for x in v]
        return ("tuple", shapes[0]) if shapes and all(s == shapes[0] for s in shapes) else ("tuple_fixed", shapes)
    if t in ("dict", "ordereddict", "counter", "defaultdict"):
        return ("dict", shape(v[0][0]), shape(v[0][1])) if v else ("dict", ("int",), ("int",))
    if t == "str":
        return ("str", "".join(sorted(set(v)))[:12] or "ab")
    if t == "int":
        return ("int",)
    if t == "ref":
        return ("ref", v)
    return (t,)


def observed_values(inputs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The scalar values (ints, strings) anywhere in the tests' own arguments: random draws recombine them,
    so arguments from a small domain (planet names, digits of a format) are hit, not only random noise."""
    found: dict[str, set[Any]] = {"int": set(), "str": set()}

    def walk(spec: Any) -> None:
        if isinstance(spec, dict):
            if spec.get("t") == "int":
                found["int"].add(int(spec["v"]))
            elif spec.get("t") == "str":
                found["str"].add(spec["v"])
            for value in spec.values():
                walk(value)
        elif isinstance(spec, list):
            for value in spec:
                walk(value)

    for item in inputs:
        if item.get("origin") == "tests":
            walk(item["args"])
            walk(item["kwargs"])
    return {k: sorted(v, key=repr) for k, v in found.items()}


OBSERVED: dict[str, list[Any]] = {"int": [], "str": []}


DRAWABLE = {"int", "bool", "float", "none", "str", "bytes", "range", "ref", "list", "iter", "tuple", "set", "frozenset"}


def drawable(s: Any) -> bool:
    """Whether :func:`draw` can write a value of shape ``s``."""
    kind = s[0]
    if kind == "tuple_fixed":
        return all(drawable(x) for x in s[1])
    if kind == "dict":
        return drawable(s[1]) and drawable(s[2])
    if kind in ("list", "iter", "tuple", "set", "frozenset"):
        return drawable(s[1])
    return kind in DRAWABLE


def draw(s: Any, rng: random.Random, depth: int = 0) -> str:
    """Python source of a fresh random value of shape ``s`` (scalars: half the time a value the tests use)."""
    kind = s[0]
    n = rng.randint(0, 6) if depth < 3 else 0
    if kind in ("int", "str") and OBSERVED[kind] and rng.random() < 0.5:
        return repr(rng.choice(OBSERVED[kind]))
    if kind == "int":
        return str(rng.randint(-3, 12) if rng.random() < 0.8 else rng.randint(-100, 100))
    if kind == "bool":
        return rng.choice(("True", "False"))
    if kind == "float":
        return repr(round(rng.uniform(-10, 10), 2))
    if kind == "none":
        return "None"
    if kind == "str":
        return repr("".join(rng.choice(s[1] + "ab ") for _ in range(n)))
    if kind == "bytes":
        return repr(bytes(rng.randrange(256) for _ in range(n)))
    if kind == "range":
        a = rng.randint(-2, 5)
        return f"range({a}, {a + rng.randint(0, 8)})"
    if kind == "ref":
        module, _, qual = s[1].partition(":")
        return f"__import__({module!r}, fromlist=['_']).{qual}"
    if kind == "tuple_fixed":
        return "(" + "".join(draw(x, rng, depth + 1) + ", " for x in s[1]) + ")"
    if kind == "dict":
        return "{" + ", ".join(f"{draw(s[1], rng, depth + 1)}: {draw(s[2], rng, depth + 1)}" for _ in range(n)) + "}"
    items = ", ".join(draw(s[1], rng, depth + 1) for _ in range(n))
    if kind in ("list", "iter"):
        return f"[{items}]" if kind == "list" else f"iter([{items}])"
    if kind == "tuple":
        return f"({items},)" if n else "()"
    return f"{kind}([{items}])"  # set, frozenset


def labeller_calls(inputs: list[dict[str, Any]], target: str, count: int, salt: str) -> list[str]:
    """``count`` distinct call expressions from the argument shapes of the tests' own calls."""
    signatures = []
    for item in inputs:
        if item.get("origin") != "tests" or item["target"] != target:
            continue
        sig = ([shape(a) for a in item["args"]], {k: shape(v) for k, v in item["kwargs"].items()})
        if not all(drawable(x) for x in [*sig[0], *sig[1].values()]):
            continue  # a function of the tests, a module: nothing this generator can write as source
        if sig not in signatures:
            signatures.append(sig)
    rng = random.Random(f"labeller:{salt}")  # another seed and another generator than the verifier's
    OBSERVED.update(observed_values(inputs))
    calls: list[str] = []
    seen: set[str] = set()
    for _ in range(count * 5):
        if not signatures or len(calls) >= count:
            break
        args, kwargs = rng.choice(signatures)
        text = ", ".join([draw(a, rng) for a in args] + [f"{k}={draw(v, rng)}" for k, v in kwargs.items()])
        call = f"{target}({text})"
        if call not in seen:
            seen.add(call)
            calls.append(call)
    return calls


def run_labeller(tree: Path, module: str, target: str, calls: list[str], sandbox: Sandbox, python: str) -> list[str]:
    nonce = secrets.token_hex(8)
    body = json.dumps({"module": module, "target": target, "calls": calls, "nonce": nonce})
    scratch = Path(tempfile.mkdtemp(prefix="pivotgym-label-"))
    try:
        work = fork_dir(tree, scratch / "repo")
        limits = JUDGE_LIMITS.with_(wall_seconds=300, cpu_seconds=300, output_bytes=16 << 20)
        argv = [python, "-s", "-P", "-B", "-c", LABELLER]
        result = sandbox.run(argv, work, limits=limits, stdin=body, env={"PYTHONHASHSEED": "0"})
    finally:
        remove_dir(scratch)
    for line in result.stdout.splitlines():
        if line.startswith(nonce):
            return list(json.loads(line[len(nonce) :]))
    return ["<no output>"] * len(calls)


# ------------------------------------------------------------------------------------------- candidates
def candidate_tree(instance: dict[str, Any], text: str, dest: Path) -> Path:
    mutation = Mutation(**instance["mutation"])
    work = fork_dir(pristine_tree(instance), dest)
    target = work / mutation.path
    target.unlink()
    target.write_text(text)
    return work


def tests_alone(work: Path, instance: dict[str, Any], sandbox: Sandbox) -> bool:
    """``judge()`` with its differential layer off where it has one: the hidden tests (and patch check)."""
    kwargs = {"differential": False} if "differential" in inspect.signature(judge).parameters else {}
    return judge(work, instance, pristine_tree(instance), sandbox=sandbox, **kwargs).solved


def evaluate_task(instance: dict[str, Any], args: argparse.Namespace, sandbox: Sandbox) -> list[dict[str, Any]]:
    mutation = Mutation(**instance["mutation"])
    text = (pristine_tree(instance) / mutation.path).read_text()
    ref = reference_for(instance, sandbox=sandbox)
    rows: list[dict[str, Any]] = []
    candidates: list[tuple[str, str, str, bool | None]] = []
    for kind, new in equivalent_rewrites(text, mutation.function, limit=args.rewrites):
        candidates.append(("rewrite", kind, new, True))
    wrongs = wrong_fixes(text, mutation.path, mutation, limit=args.mutants)
    candidates.append(("original_bug", wrongs[0][0], wrongs[0][1], False))
    candidates += [("mutant", label, new, None) for label, new in wrongs[1:]]
    try:
        candidates.append(("forgery", "always_equal", always_equal(text, mutation.function), False))
    except ValueError:  # a method: the forgery is written for module-level functions
        pass
    lab_sandbox, python, _hide = setup(instance, sandbox, None)
    calls = labeller_calls(ref.inputs, mutation.function, args.label_inputs, instance["instance_id"])
    reference_out = (
        run_labeller(pristine_tree(instance), ref.module, mutation.function, calls, lab_sandbox, python)
        if calls
        else []
    )
    with tempfile.TemporaryDirectory(prefix="pivotgym-agree-") as tmp:
        for i, (kind, detail, new, label) in enumerate(candidates):
            work = candidate_tree(instance, new, Path(tmp) / f"c{i}")
            how = "construction"
            random_label, differs = None, []  # random testing: a mutant's label, a cross-check for the others
            if calls:
                got = run_labeller(work, ref.module, mutation.function, calls, lab_sandbox, python)
                differs = [c for c, a, b in zip(calls, got, reference_out) if a != b and "<slow>" not in (a, b)]
                random_label = not differs
            started = time.perf_counter()
            by_tests = tests_alone(work, instance, sandbox)
            if label is None:  # a mutant: wrong if it fails a hidden test (certain: the reference passes them all)
                if not by_tests:
                    label, how = False, "fails a hidden test"
                elif random_label is None:
                    rows.append({"task": instance["instance_id"], "kind": kind, "detail": detail, "label": None})
                    remove_dir(work)
                    continue
                else:  # else independent random testing against the reference decides
                    label, how = random_label, f"random testing ({len(calls)} calls, {len(differs)} differ)"
            diff = check_differential(work, instance, sandbox=sandbox)
            rows.append(
                {
                    "task": instance["instance_id"],
                    "kind": kind,
                    "detail": detail,
                    "label": label,
                    "labelled_by": how,
                    "random_testing_says": random_label,
                    "tests": by_tests,
                    "tests+differential": by_tests and diff.ok,
                    "differential_alone": diff.ok,
                    "differential_reason": diff.reason,
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
            remove_dir(work)
    return rows


def score(rows: list[dict[str, Any]], verifier: str) -> dict[str, Any]:
    return agreement([bool(r["label"]) for r in rows], [bool(r[verifier]) for r in rows])


def floors(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    positives = sum(bool(r["label"]) for r in rows)
    out = {}
    for name, agree in (("reject_all", n - positives), ("credit_all", positives)):
        low, high = wilson(agree, n)
        out[name] = {"rate": round(agree / n, 4) if n else None, "ci95": [round(low, 4), round(high, 4)]}
    return out


VERIFIERS = ("tests", "tests+differential")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="toolz,more-itertools,humanevalfix")
    parser.add_argument("--split", default="test", choices=("test", "train", "all"))
    parser.add_argument("--limit", type=int, default=0, help="at most this many tasks per set (0: all)")
    parser.add_argument("--rewrites", type=int, default=4, help="equivalent rewrites per task")
    parser.add_argument("--mutants", type=int, default=5, help="other mutants per task")
    parser.add_argument("--label-inputs", type=int, default=400, help="random calls per mutant for its label")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the JSON report to this file")
    parser.add_argument("--misses", type=int, default=10, help="disagreements listed")
    args = parse_args(parser, sets="humanevalfix", limit=1, rewrites=1, mutants=1, label_inputs=5)
    sandbox = get_sandbox()
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name in args.sets.split(","):
        tasks = [t for t in load_task_set(str(task_file(name))) if args.split in ("all", t["split"])]
        for instance in tasks[: args.limit or None]:
            rows += evaluate_task(instance, args, sandbox)
            if not args.json:
                print(f"  judged {instance['instance_id']}", file=sys.stderr, flush=True)
    labelled = [r for r in rows if r["label"] is not None]
    report: dict[str, Any] = {
        "candidates": len(labelled),
        "unlabelled_mutants": len(rows) - len(labelled),
        "positives": sum(bool(r["label"]) for r in labelled),
        "seconds": round(time.perf_counter() - started, 1),
        "overall": {v: score(labelled, v) for v in VERIFIERS},
        "floors": floors(labelled),
        "by_kind": {},
        "by_set": {},
    }
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    sets: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in labelled:
        groups[r["kind"] + (":correct" if r["label"] else ":wrong") if r["kind"] == "mutant" else r["kind"]].append(r)
        sets[r["task"].split("__")[0]].append(r)
    report["by_kind"] = {k: {v: score(g, v) for v in VERIFIERS} for k, g in sorted(groups.items())}
    report["by_set"] = {k: {v: score(g, v) for v in VERIFIERS} for k, g in sorted(sets.items())}
    sources: dict[str, int] = defaultdict(int)
    for r in labelled:
        sources[f"{r['kind']}: {r['labelled_by'].split(' (')[0]}"] += 1
    report["label_sources"] = dict(sorted(sources.items()))
    checked = [r for r in labelled if r["labelled_by"] == "construction" and r["random_testing_says"] is not None]
    report["labeller_vs_construction"] = {
        kind: {
            "n": sum(r["kind"] == kind for r in checked),
            "agree": sum(r["kind"] == kind and r["random_testing_says"] == r["label"] for r in checked),
        }
        for kind in ("rewrite", "original_bug", "forgery")
    }
    misses = [r for r in labelled if r["tests+differential"] != r["label"] or r["tests"] != r["label"]]
    report["disagreements"] = misses[: args.misses]
    if args.out:
        Path(args.out).write_text(json.dumps({**report, "rows": rows}, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{report['candidates']} labelled candidates ({report['positives']} correct), "
        f"{report['unlabelled_mutants']} unlabelled mutants, {report['seconds']} s"
    )
    header = f"{'group':28} {'verifier':20} {'n':>4} {'agree':>6} {'ci95':>17} {'fp':>4} {'fn':>4}"
    print(header)
    print("-" * len(header))
    sections = [("overall", report["overall"])] + list(report["by_kind"].items()) + list(report["by_set"].items())
    for group, scores in sections:
        for v in VERIFIERS:
            s = scores[v]
            ci = f"[{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]"
            print(f"{group:28} {v:20} {s['n']:>4} {s['rate']:>6.3f} {ci:>17} {s['fp']:>4} {s['fn']:>4}")
    print("labels: " + ", ".join(f"{k} {n}" for k, n in report["label_sources"].items()))
    for kind, c in report["labeller_vs_construction"].items():
        print(f"random-testing labeller on {kind}: agrees with the construction label {c['agree']}/{c['n']}")
    for name, f in report["floors"].items():
        print(f"floor {name:22} {f['rate']:.3f} [{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]")
    for r in report["disagreements"]:
        print(
            f"  miss: {r['task']} {r['kind']} {r['detail']} label={r['label']} tests={r['tests']} "
            f"tests+differential={r['tests+differential']} ({r['labelled_by']}; {r['differential_reason'][:120]})"
        )


if __name__ == "__main__":
    main()
