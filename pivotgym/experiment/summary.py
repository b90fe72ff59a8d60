"""The experiment's summary: typed, versioned data that ``report.md`` renders and the claims are read from.

``summary.json`` holds every number the report prints (scores per method and seed, floors, differences with
their intervals and minimum detectable differences, matched budgets, the spend, the harm check, provenance). It is
written atomically (:func:`write_summary`: a crash never leaves half a file) with :data:`SUMMARY_VERSION`, and
:func:`read_summary` refuses a file of another version with the command that rewrites it. The claims are
functions of a summary alone (:func:`claims`), so they are tested on hand-made summaries without a run folder, and
a claim whose comparison could not be made is printed as such rather than as a verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from pivotgym.errors import ConfigError
from pivotgym.eval.io import write_json
from pivotgym.experiment.config import parse_comparison
from pivotgym.experiment.layout import METHOD_LABELS
from pivotgym.experiment.stats import CONTRADICTED, NOT_MEASURABLE, REPRODUCED, difference_text

__all__ = [
    "LIKELIHOOD_SET",
    "TURN_CAP_ROOM",
    "SUMMARY_VERSION",
    "Difference",
    "MethodScores",
    "Summary",
    "claims",
    "comparison_label",
    "held_back_text",
    "pct",
    "primary_claim",
    "read_summary",
    "write_summary",
]

#: the summary's layout version: 2 added crossed intervals (``method: crossed``, ``df``, ``components``,
#: ``seed_effect``), the primary comparison, the RL start model and matched budgets that can be not measurable
SUMMARY_VERSION = 2
#: item sets of the differences beside the member roles: the probability of a credited action at the held-out
#: states (``eval.likelihood``), a continuous view of turn accuracy
LIKELIHOOD_SET = "p_credited"


class Difference(TypedDict, total=False):
    """A difference between two methods (:func:`~pivotgym.experiment.stats.item_difference`) or at a matched
    budget (:func:`~pivotgym.experiment.stats.matched_budget`); without ``diff`` it could not be made and
    ``reason`` (or ``error``) says why."""

    diff: float
    low: float | None
    high: float | None
    level: float
    method: str
    items: int
    tasks: int
    seeds: int
    se: float | None
    df: float | None
    mdd: float | None
    mdd_more_items: float | None
    mdd_more_seeds: float | None
    seed_effect: str
    components: dict[str, float | None]
    verdict: str
    reason: str
    error: str


class MethodScores(TypedDict):
    """One method's scores: means over its seeds, deltas against the base model, and the per-seed values."""

    in_domain: float | None
    ood: float | None
    delta_in_domain: float | None
    delta_ood: float | None
    seeds: list[int]
    per_seed_in_domain: list[float]
    per_seed_ood: list[float]


class Summary(TypedDict, total=False):
    """What ``summary.json`` holds (the report's sections, in its order)."""

    version: int
    name: str
    env: str
    model: str
    seeds: list[int]
    report: str
    rl_start: str
    primary: str
    methods: dict[str, MethodScores]
    episodes: dict[str, float | None]
    floors: dict[str, Any]
    accounting: dict[str, Any]
    differences: dict[str, Difference]
    budget: dict[str, Difference]
    budget_sft: dict[str, Difference]
    e2e_turn_cap: dict[str, Any]
    efficiency: dict[str, Any]
    uninformative: dict[str, Any]
    ablation: dict[str, Any]
    harm: dict[str, Any]
    provenance: dict[str, Any]


def write_summary(path: str | Path, summary: Mapping[str, Any]) -> None:
    """Write ``summary`` to ``path`` atomically, stamped with :data:`SUMMARY_VERSION`."""
    write_json(path, json.loads(json.dumps({"version": SUMMARY_VERSION, **summary}, default=str)))


def read_summary(path: str | Path) -> Summary:
    """Read a summary written by :func:`write_summary`; a file of another version is a :class:`ConfigError`
    that names the command which rewrites it from the run folder."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("version") != SUMMARY_VERSION:
        raise ConfigError(
            f"{path}: summary version {data.get('version')!r}, this pivotgym reads {SUMMARY_VERSION}; rewrite it "
            "from its run folder with `pivotgym experiment CONFIG --out RUN --stages report`"
        )
    out: Summary = data
    return out


def pct(value: float | None, digits: int = 1) -> str:
    """``0.4321`` -> ``43.2``; None -> ``-``."""
    return "-" if value is None else f"{100 * value:.{digits}f}"


def seed_list(seeds: Iterable[int] | None) -> str:
    """``0, 1, 2`` (``-`` for none): the seeds a row or a mean is over."""
    return ", ".join(str(s) for s in seeds or []) or "-"


# ------------------------------------------------------------------------------------------------- claims
#: E2E RL's turn cap must leave this much room over the longest expert plan it trains on, or its episodes
#: cannot reach the goal of some of its tasks (leave the cap unset for the env's own limit, or give it this room)
TURN_CAP_ROOM = 1.5


def held_back_text(cap: Mapping[str, Any]) -> str:
    """The sentence that says E2E RL was held back by its turn cap."""
    return (
        f"E2E RL is held back by its configuration: its episodes are capped at {cap['max_turns']} turns while the "
        f"longest expert plan it trains on has {cap['longest_plan']} steps"
        + (f" ({len(cap['unsolvable'])} of its tasks cannot be solved within the cap)" if cap["unsolvable"] else "")
        + "; every comparison with it is against a handicapped baseline (`e2e.max_turns`: leave it unset for the "
        f"env's own limit, or at least {TURN_CAP_ROOM}x the longest plan)."
    )


#: the budget axes of PivotRL against SFT, as the claims name them
SFT_BUDGET_LABELS = {
    "optimizer_steps": "at matched optimiser steps",
    "tokens_trained": "at matched tokens trained",
    "lr_sum": "at a matched sum of learning rates",
    "seconds": "at matched wall-clock",
}


def comparison_label(key: str) -> str:
    """``PivotRL − SFT, P(credited action)`` for ``pivot-vs-sft-p_credited`` (the key itself when it names no
    comparison)."""
    parsed = parse_comparison(key)
    if parsed is None:
        return key
    a, b, items = parsed
    where = {"in_domain": "in-domain", "ood": "OOD", LIKELIHOOD_SET: "P(credited action)"}[items]
    return f"{METHOD_LABELS[a]} − {METHOD_LABELS[b]}, {where}"


def primary_claim(summary: Mapping[str, Any]) -> list[str]:
    """The primary comparison's line, and the note that every other one is secondary."""
    key = summary.get("primary")
    if not key:
        return []
    result = summary.get("differences", {}).get(key)
    text = (
        difference_text(result, "test tasks" if not key.endswith("-ood") else "items")
        if result
        else f"{NOT_MEASURABLE} (the run has no item scores of both models)"
    )
    return [
        f"- **Primary comparison** (named in the config before the run), {comparison_label(key)}: {text}.",
        "- Every other comparison below is secondary: exploratory, with no correction for how many there are.",
    ]


def claims(summary: Mapping[str, Any]) -> list[str]:
    """Plain statements of which claims this run reproduces, computed from the summary alone (no run folder):
    the primary comparison first, then the secondary ones; a claim whose comparison cannot be made says so."""
    m = summary["methods"]
    out = primary_claim(summary)
    for key, claim in (
        ("turns", "PivotRL ahead of E2E RL at matched rollout turns (profiling counted)"),
        ("seconds", "PivotRL ahead of E2E RL at matched wall-clock"),
    ):
        matched = summary.get("budget", {}).get(key)
        if matched:
            out.append(f"- **{claim}**: {difference_text(matched, 'tasks')}.")
    for ref, name in (("sft", "SFT"), ("sft-more", "continued SFT (matched optimiser steps)")):
        if "pivot" in m and ref in m and m["pivot"]["in_domain"] is not None and m[ref]["in_domain"] is not None:
            diff = summary.get("differences", {}).get(f"pivot-vs-{ref}-in_domain")
            detail = f"({pct(m['pivot']['in_domain'])} vs {pct(m[ref]['in_domain'])}"
            seeds_a, seeds_b = m["pivot"].get("seeds"), m[ref].get("seeds")
            if seeds_a != seeds_b:  # the means above are over different seeds; the paired difference is not
                detail += f", means over seeds {seed_list(seeds_a)} and {seed_list(seeds_b)}"
            if diff:
                detail += "; difference " + difference_text(diff, "test tasks")
                verdict = diff["verdict"]
            else:
                verdict = NOT_MEASURABLE
            out.append(f"- **In-domain PivotRL > {name}**: {verdict} {detail}).")
            if likely := summary.get("differences", {}).get(f"pivot-vs-{ref}-{LIKELIHOOD_SET}"):
                out.append(
                    f"- **In-domain PivotRL > {name}, by the probability of a credited action** (the same held-out "
                    "states scored by likelihood: a continuous value per state, not one greedy action): "
                    f"{likely['verdict']} "
                    f"(difference {difference_text(likely, 'test tasks', verdict=False)})."
                )
    if cap := summary.get("e2e_turn_cap"):
        out.append(f"- **{held_back_text(cap)}**")
    if along := summary.get("budget_sft"):
        out.append(
            "- **In-domain PivotRL > SFT at matched budgets** (interpolated inside both learning curves): "
            + "; ".join(
                f"{SFT_BUDGET_LABELS.get(key, key)}: {difference_text(d, 'test tasks')}" for key, d in along.items()
            )
            + "."
        )
    diffs = summary.get("differences", {})

    def interval(key: str) -> str:
        # the sign of each difference is stated, not a verdict: "SFT - base" supports the claim when it is
        # *below* 0, "PivotRL - SFT" when it is above
        d = diffs.get(key)
        if not d or d["low"] is None:
            side = "no interval"
        else:
            side = "above 0" if d["low"] > 0 else "below 0" if d["high"] < 0 else "includes 0"
        return "" if not d else f" {difference_text(d, verdict=False)} ({side})"

    if "pivot" in m and "sft" in m and m["pivot"]["delta_ood"] is not None and m["sft"]["delta_ood"] is not None:
        # both arms start from the RL start model: what SFT and PivotRL did to OOD is measured against it (a
        # change from base that the start model already had belongs to the start model)
        start = summary.get("rl_start", "base")
        label = METHOD_LABELS.get(start, start)
        dp, ds = m["pivot"]["delta_ood"], m["sft"]["delta_ood"]
        regress, retain = diffs.get(f"sft-vs-{start}-ood", {}), diffs.get("pivot-vs-sft-ood", {})
        sft_regresses, sft_gains = regress.get("verdict") == CONTRADICTED, regress.get("verdict") == REPRODUCED
        if sft_regresses and retain.get("verdict") == REPRODUCED:
            verdict = REPRODUCED
        elif sft_gains:
            verdict = f"{CONTRADICTED} (SFT gains OOD here rather than regressing)"
        elif sft_regresses:
            verdict = "partly measurable (SFT regresses; PivotRL is not measurably ahead of it)"
        elif regress:
            verdict = (
                f"{NOT_MEASURABLE}: SFT does not measurably change OOD from the {label} model it starts from, so "
                "there is no regression for PivotRL to avoid"
            )
        else:
            verdict = NOT_MEASURABLE
        fallback = "" if start != "base" else f" {100 * ds:+.1f} points"
        out.append(
            f"- **OOD retained by PivotRL, SFT regresses**: {verdict}. SFT − {label} on OOD"
            f"{interval(f'sft-vs-{start}-ood') or fallback or ' -'}; PivotRL − {label} on OOD"
            f"{interval(f'pivot-vs-{start}-ood') or (f' {100 * dp:+.1f} points' if start == 'base' else ' -')}; "
            f"PivotRL − SFT on OOD{interval('pivot-vs-sft-ood') or ' -'}."
        )
    a = summary["ablation"]
    if "pivot" in a and "random-turns" in a:
        better = "yes" if a["pivot"]["in_domain"] > a["random-turns"]["in_domain"] else "no"
        out.append(
            f"- **Pivots beat random turns** (point estimate, no interval): {better} "
            f"({pct(a['pivot']['in_domain'])} vs {pct(a['random-turns']['in_domain'])})."
        )
    if "pivot" in a and "exact-reward" in a:
        out.append(
            f"- **Functional reward beats exact match** (point estimate, no interval): "
            f"{'yes' if a['pivot']['in_domain'] > a['exact-reward']['in_domain'] else 'no'} "
            f"({pct(a['pivot']['in_domain'])} vs {pct(a['exact-reward']['in_domain'])})."
        )
    if "placebo" in a and "pivot" in a:
        paired = summary.get("differences", {}).get("pivot-vs-placebo-in_domain")
        out.append(
            "- **The placebo changes less than PivotRL**"
            + ("" if paired else " (point estimate, no interval)")
            + f": PivotRL {pct(a['pivot']['in_domain'])} vs placebo {pct(a['placebo']['in_domain'])}"
            + (
                f" (paired over the seeds both ran: {difference_text(paired, 'test tasks', verdict=False)})"
                if paired
                else ""
            )
            + (
                "; on non-pivot training states "
                + ", ".join(f"{METHOD_LABELS[tag]} {100 * h['delta']:+.1f} points" for tag, h in harm.items())
                if (harm := summary.get("harm") or {})
                else "; not measured on non-pivot training states (`pivot.non_pivot_eval: 0`)"
            )
            + "."
        )
    return out or ["- not enough stages finished to judge"]
