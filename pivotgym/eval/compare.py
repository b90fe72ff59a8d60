"""Compare two suite results (base and trained): per-member differences with their 95% intervals, and the
mean in-domain and OOD differences (the paper's retention claim).

Two results are comparable only when they scored the same thing: the same suite, and for every member both
scored, the same metric and the same items (the ``per_item`` task ids where both results record them, else
the same ``n``). :func:`compare` refuses anything else with :class:`~pivotgym.errors.ResultMismatch` unless
told ``allow_mismatch=True``, since a difference of unlike numbers looks just like a real one.

A member's interval is *paired* when both results record the same items' scores (the usual case for
``pivotgym eval`` results): the interval of the mean per-item difference, from which each item's difficulty
cancels. Otherwise it is *unpaired*: the two scores' own intervals combined as independent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pivotgym.errors import ResultMismatch
from pivotgym.eval.stats import ROLES, mean_interval, paired_interval, unpaired_interval


def mismatches(base: Mapping[str, Any], trained: Mapping[str, Any]) -> list[str]:
    """Why ``base`` and ``trained`` measure different things, one line each (empty when they are alike):
    a different suite, or a member both scored with a different metric or item set."""
    problems = []
    if base.get("suite") != trained.get("suite"):
        problems.append(f"suite: base is {base.get('suite')!r}, trained is {trained.get('suite')!r}")
    for key in (k for k in base["scores"] if k in trained["scores"]):
        b, t = base["scores"][key], trained["scores"][key]
        if b.get("metric") != t.get("metric"):
            problems.append(f"member {key}: metric {b.get('metric')!r} in base, {t.get('metric')!r} in trained")
            continue
        b_items, t_items = b.get("per_item"), t.get("per_item")
        if b_items is not None and t_items is not None:
            if set(b_items) != set(t_items):
                shared = len(set(b_items) & set(t_items))
                problems.append(
                    f"member {key}: different items (base {len(b_items)}, trained {len(t_items)}, {shared} in both)"
                )
        elif b.get("n") != t.get("n"):
            problems.append(f"member {key}: n is {b.get('n')} in base, {t.get('n')} in trained")
    return problems


def _row(key: str, role: str, b: Mapping[str, Any], t: Mapping[str, Any]) -> dict[str, Any]:
    """One member's comparison: values, difference, its interval and whether that interval is paired."""
    delta = t["value"] - b["value"]
    b_items, t_items = b.get("per_item") or {}, t.get("per_item") or {}
    paired = bool(b_items) and set(b_items) == set(t_items)
    if paired:
        interval = paired_interval(b_items, t_items)
    elif b.get("ci95") and t.get("ci95"):
        interval = unpaired_interval(b["value"], b["ci95"], t["value"], t["ci95"])
    else:
        interval = None
    return {
        "env": key,
        "role": role,
        "metric": t.get("metric", b.get("metric")),
        "base": b["value"],
        "trained": t["value"],
        "delta": delta,
        "delta_ci95": interval,
        "paired": paired,
        "n": min(b.get("n", 0), t.get("n", 0)),
        "base_ci95": b.get("ci95"),
        "trained_ci95": t.get("ci95"),
    }


def compare(base: Mapping[str, Any], trained: Mapping[str, Any], *, allow_mismatch: bool = False) -> dict[str, Any]:
    """Per-member deltas (trained - base) over the members both results scored, each with its 95% interval,
    and the mean in-domain and OOD deltas. Members in only one result are listed, not averaged.

    Raises :class:`~pivotgym.errors.ResultMismatch` naming the first member (and what differs) when the two
    results measured different things (:func:`mismatches`), unless ``allow_mismatch``; the lines are kept in
    the comparison's ``mismatches`` either way."""
    problems = mismatches(base, trained)
    if problems and not allow_mismatch:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ResultMismatch(
            f"results not comparable: {problems[0]}{more}",
            hint="compare scorings of the same suite, metric and items, or pass --allow-mismatch",
        )
    shared = [k for k in base["scores"] if k in trained["scores"]]
    roles = {**base.get("role", {}), **trained.get("role", {})}
    rows = [_row(key, roles.get(key, "ood"), base["scores"][key], trained["scores"][key]) for key in shared]
    averages: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        sel = [r for r in rows if r["role"] == role]
        if sel:
            deltas = [r["delta"] for r in sel]
            intervals = [r["delta_ci95"] for r in sel]
            averages[role] = {
                "base": sum(r["base"] for r in sel) / len(sel),
                "trained": sum(r["trained"] for r in sel) / len(sel),
                "delta": sum(deltas) / len(sel),
                "n_envs": len(sel),
                "delta_ci95": mean_interval(deltas, intervals) if None not in intervals else None,
                "paired": all(r["paired"] for r in sel),
            }
        else:
            averages[role] = {
                "base": None,
                "trained": None,
                "delta": None,
                "n_envs": 0,
                "delta_ci95": None,
                "paired": False,
            }
    return {
        "base_model": base.get("model"),
        "trained_model": trained.get("model"),
        "suite": trained.get("suite"),
        "rows": rows,
        "averages": averages,
        "mismatches": problems,
        "only_base": sorted(set(base["scores"]) - set(shared)),
        "only_trained": sorted(set(trained["scores"]) - set(base["scores"])),
    }


def format_comparison(comp: Mapping[str, Any]) -> str:
    """The comparison as a plain-text table (per member, then the in-domain and OOD averages), each delta with
    its 95% interval and whether that interval is paired over items."""

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}"

    def signed(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.1f}"

    def interval(ci: Any) -> str:
        return "-" if not ci else f"[{signed(ci[0])}, {signed(ci[1])}]"

    header = ["env", "role", "metric", "base", "trained", "delta", "delta 95% CI", "interval", "n"]
    rows = [
        [
            r["env"],
            r["role"],
            r["metric"],
            pct(r["base"]),
            pct(r["trained"]),
            signed(r["delta"]),
            interval(r.get("delta_ci95")),
            "paired" if r.get("paired") else "unpaired",
            str(r["n"]),
        ]
        for r in comp["rows"]
    ]
    for role in ROLES:
        a = comp["averages"][role]
        if a["n_envs"]:
            rows.append(
                [
                    f"average {role}",
                    role,
                    "",
                    pct(a["base"]),
                    pct(a["trained"]),
                    signed(a["delta"]),
                    interval(a.get("delta_ci95")),
                    "paired" if a.get("paired") else "unpaired",
                    f"{a['n_envs']} envs",
                ]
            )
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(
        "(scores in %, delta = trained - base; paired: the interval of the per-item differences, "
        "unpaired: the two scores' intervals combined)"
    )
    for problem in comp.get("mismatches", []):
        lines.append(f"warning: {problem}")
    return "\n".join(lines)


__all__ = ["compare", "format_comparison", "mismatches"]
