"""Agreement of the tool-use verifiers with BFCL's answer lists, judging from the expert's calls alone.

Pairs (:mod:`pivotgym_tooluse.bfcl_pairs`) come from BFCL items and are labelled by BFCL's answer lists, never by
a verifier: ``sql`` and ``exec`` are categories the plugin does not ship; ``shipped`` are the python categories
it ships (BFCL's data, kept apart). Each pair is judged through ``VerifyContext.from_turn`` (the item's
functions, its question and the expert's calls; no task id) by ``tooluse/functional`` and ``tooluse/exact``.

Printed, per source and category: agreement (verdict == label) with a 95 % Wilson interval, overall and on the
subset decidable from the expert's call alone, false positives (credited, label negative) and false negatives;
then per transformation. ``--json`` prints one JSON object; ``--every K`` keeps every K-th item.

    .venv/bin/python benchmarks/tooluse_bfcl_pairs.py [--json] [--every K] [--misses N]
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Any

os.environ.setdefault("PIVOTGYM_LOAD_PLUGINS", "tooluse")

from _smoke import parse_args

import pivotgym
from pivotgym.eval.stats import agreement
from pivotgym_tooluse.bfcl_pairs import SOURCES, Pair, context_for, generate
from pivotgym_tooluse.verifier import ToolCallExactVerifier, ToolCallVerifier, reason_code


def judge(pairs: list[Pair], verifier: Any, env: Any) -> list[tuple[bool, str]]:
    """``(credited, reason code)`` per pair."""
    out = []
    for p in pairs:
        verdict = verifier.verify(context_for(p, env_factory=lambda: env), p.text)
        out.append((verdict.reward == 1.0, reason_code(verdict)))
    return out


def score(pairs: list[Pair], verdicts: list[tuple[bool, str]]) -> dict[str, Any]:
    """Agreement with its Wilson interval, false positives and false negatives of a set of judged pairs."""
    return agreement([p.label for p in pairs], [credited for credited, _ in verdicts])


def breakdown(pairs: list[Pair], verdicts: list[tuple[bool, str]], key: Any) -> dict[str, Any]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        groups[key(p)].append(i)
    out = {}
    for name, idx in sorted(groups.items()):
        sub, ver = [pairs[i] for i in idx], [verdicts[i] for i in idx]
        dec = [i for i, p in enumerate(sub) if p.decidable]
        out[name] = {
            "all": score(sub, ver),
            "decidable": score([sub[i] for i in dec], [ver[i] for i in dec]),
        }
    return out


def run(every: int = 1, misses: int = 0) -> dict[str, Any]:
    env = pivotgym.make("tooluse/bfcl-simple-v0")
    verifiers = {"functional": ToolCallVerifier(), "exact": ToolCallExactVerifier()}
    results: dict[str, Any] = {"verifier_version": ToolCallVerifier.version, "every": every, "sources": {}}
    for source in SOURCES:
        pairs = generate(source, every=every)
        entry: dict[str, Any] = {}
        for name, verifier in verifiers.items():
            verdicts = judge(pairs, verifier, env)
            entry[name] = {
                "total": breakdown(pairs, verdicts, lambda p: "all")["all"],
                "per_category": breakdown(pairs, verdicts, lambda p: p.category),
                "per_transform": breakdown(pairs, verdicts, lambda p: p.transform),
                "excluded": dict(
                    sorted(_count(p.why.split(":")[0] + ": " + p.why.split(": ", 1)[1] for p in pairs if p.why).items())
                ),
            }
            if name == "functional" and misses:
                wrong = [
                    {
                        "item": p.item,
                        "transform": p.transform,
                        "param": p.param,
                        "label": p.label,
                        "decidable": p.decidable,
                        "reason": code,
                        "candidate": p.text[:200],
                    }
                    for p, (credited, code) in zip(pairs, verdicts)
                    if credited != p.label
                ]
                entry[name]["misses"] = [w for w in wrong if w["decidable"]][:misses] + [
                    w for w in wrong if not w["decidable"]
                ][:misses]
                entry[name]["miss_reasons"] = dict(_count(f"{w['transform']}/{w['reason']}" for w in wrong))
        results["sources"][source] = entry
    return results


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return dict(out)


def _cell(s: dict[str, Any]) -> str:
    if not s["n"]:
        return "-"
    return (
        f"{s['rate']:.4f} [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}] ({s['agree']}/{s['n']}; FP {s['fp']}, FN {s['fn']})"
    )


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"tooluse/functional version {results['verifier_version']}, every {results['every']}-th item",
        "",
        "| source | category | functional, all | functional, decidable | exact, all | exact, decidable |",
        "|---|---|---|---|---|---|",
    ]
    for source, entry in results["sources"].items():
        f, e = entry["functional"], entry["exact"]
        rows = [("**all**", f["total"], e["total"])] + [
            (c, f["per_category"][c], e["per_category"][c]) for c in f["per_category"]
        ]
        for cat, fs, es in rows:
            lines.append(
                f"| {source} | {cat} | {_cell(fs['all'])} | {_cell(fs['decidable'])} | {_cell(es['all'])} | "
                f"{_cell(es['decidable'])} |"
            )
    lines += ["", "| source | transform | functional, all | functional, decidable |", "|---|---|---|---|"]
    for source, entry in results["sources"].items():
        for t, s in entry["functional"]["per_transform"].items():
            lines.append(f"| {source} | {t} | {_cell(s['all'])} | {_cell(s['decidable'])} |")
    for source, entry in results["sources"].items():
        lines += ["", f"excluded from the decidable subset ({source}): {entry['functional']['excluded']}"]
        if "miss_reasons" in entry["functional"]:
            lines.append(f"functional misses by transform/reason ({source}): {entry['functional']['miss_reasons']}")
            for w in entry["functional"]["misses"]:
                lines.append(f"  - {json.dumps(w)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--every", type=int, default=1, help="keep every K-th item (1: all)")
    parser.add_argument("--misses", type=int, default=0, help="list up to N disagreeing pairs per source")
    args = parse_args(parser, every=50, misses=2)
    results = run(args.every, args.misses)
    print(json.dumps(results, indent=2) if args.json else markdown(results))


if __name__ == "__main__":
    main()
