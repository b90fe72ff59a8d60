"""The experiment report: ``report.md`` (Markdown tables, the plots beside it in ``plots/``) and
``summary.json``, assembled from a run folder's files through its :class:`RunLayout`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pivotgym.eval.floors import floor_label
from pivotgym.experiment.accounting import accounting_table
from pivotgym.experiment.config import ExperimentConfig, parse_comparison
from pivotgym.experiment.fingerprint import StageRecord, stage_plan
from pivotgym.experiment.layout import METHOD_LABELS, STAGES, RunLayout, rl_start_stage
from pivotgym.experiment.plots import Curve, plot_bars, plot_curves
from pivotgym.experiment.provenance import UNKNOWN, provenance_lines, stage_code_lines
from pivotgym.experiment.stats import (
    NOT_MEASURABLE,
    difference_text,
    item_difference,
    matched_budget,
    reach_ratio,
    seed_difference,
)
from pivotgym.experiment.summary import (
    LIKELIHOOD_SET,
    TURN_CAP_ROOM,
    claims,
    held_back_text,
    pct,
    seed_list,
    write_summary,
)
from pivotgym.jsonl import read_trajectories

__all__ = ["markdown_table", "pct", "ratio_text", "write_experiment_report"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are converted with ``str``."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ratio_text(ratio: Mapping[str, Any], unit: str) -> str:
    """One sentence for a :func:`reach_ratio` result."""
    if ratio.get("target") is None:
        return "not measured"
    if ratio.get("fast") is None:
        return f"PivotRL did not reach E2E's final score ({pct(ratio['target'])}%) within its budget"
    if not ratio.get("reference"):
        return (
            f"not measurable: E2E RL ended no higher than it started (final score {pct(ratio['target'])}%), so "
            "reaching its final score costs nothing"
        )
    if not ratio.get("ratio"):
        return f"PivotRL reached {pct(ratio['target'])}% at {ratio['fast']:.0f} {unit} (E2E: {ratio['reference']:.0f})"
    # ratio = E2E's cost / PivotRL's: above 1 PivotRL got there cheaper, below 1 it needed more
    factor = f"**{ratio['ratio']:.2f}x** fewer" if ratio["ratio"] >= 1 else f"**{1 / ratio['ratio']:.2f}x** more"
    return (
        f"PivotRL reached E2E's final score ({pct(ratio['target'])}%) after {ratio['fast']:.0f} {unit} vs "
        f"E2E's {ratio['reference']:.0f}: {factor}"
    )


# ----------------------------------------------------------------------------------------- experiment report
#: the main table's rows: method tag -> label
METHODS = tuple((tag, METHOD_LABELS[tag]) for tag in ("base", "warmup", "sft", "sft-more", "pivot", "e2e"))
#: the matched-budget comparisons of PivotRL and E2E RL: summary key, curve x, profiling counted, label
BUDGETS = (
    ("turns", "turns", True, "rollout turns, profiling counted"),
    ("turns_trained", "turns", False, "rollout turns, profiling not counted (the paper's count)"),
    ("seconds", "seconds", True, "wall-clock, profiling counted"),
    ("optimizer_steps", "optimizer_steps", True, "optimiser steps applied"),
    ("tokens_trained", "tokens_trained", True, "tokens trained"),
    ("lr_sum", "lr_sum", True, "sum of the learning rates applied"),
)
#: the budgets PivotRL and SFT are compared at (SFT generates no rollout turns), as :data:`BUDGETS`
SFT_BUDGETS = (
    ("optimizer_steps", "optimizer_steps", True, "optimiser steps applied"),
    ("tokens_trained", "tokens_trained", True, "tokens trained"),
    ("lr_sum", "lr_sum", True, "sum of the learning rates applied"),
    ("seconds", "seconds", True, "wall-clock, profiling counted"),
)
#: the unit of each budget axis in the report's sentences
BUDGET_UNITS = {"turns": "turns", "seconds": "s", "optimizer_steps": "steps", "tokens_trained": "tokens", "lr_sum": ""}
#: the ablation table's rows
ABLATIONS = (
    ("pivot", "PivotRL (pivots, functional)"),
    ("random-turns", METHOD_LABELS["random-turns"]),
    ("exact-reward", METHOD_LABELS["exact-reward"]),
    ("placebo", METHOD_LABELS["placebo"]),
    ("e2e", METHOD_LABELS["e2e"]),
    ("e2e-progress", METHOD_LABELS["e2e-progress"]),
    ("e2e-expert-states", METHOD_LABELS["e2e-expert-states"]),
)
#: the runs of the harm check (training states that are not pivots, before and after)
HARM_CHECKED = ("pivot", "placebo")


def harm_check(layout: RunLayout, seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per RL run of :data:`HARM_CHECKED`: the greedy pass rate on profiled training turns that are *not*
    pivots at the trainer's first and last evaluation (``eval_non_pivot_pass``), and the weights' RMS drift
    from the start at the last step, with a paired t interval over seeds of the change (``interval``: the
    trainers log the pass rate per seed, not per state). A method that does no harm keeps the first; the placebo
    shows what the optimiser alone does to it."""
    out: dict[str, dict[str, Any]] = {}
    for tag in HARM_CHECKED:
        starts, ends, drifts, states = [], [], [], []
        for seed in seeds:
            path = layout.metrics(tag, seed)
            if not path.exists():
                continue
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            evals = [r for r in rows if r.get("kind") == "eval" and r.get("eval_non_pivot_pass") is not None]
            if len(evals) < 2:
                continue
            starts.append(float(evals[0]["eval_non_pivot_pass"]))
            ends.append(float(evals[-1]["eval_non_pivot_pass"]))
            states.append(int(evals[-1].get("eval_non_pivot_states", 0)))
            drift = [r["drift_rms"] for r in rows if r.get("drift_rms") is not None]
            if drift:
                drifts.append(float(drift[-1]))
        if starts:
            n = len(starts)
            out[tag] = {
                "start": sum(starts) / n,
                "end": sum(ends) / n,
                "delta": (sum(ends) - sum(starts)) / n,
                "interval": seed_difference([e - s for s, e in zip(starts, ends)]),
                "states": states,
                "drift_rms": sum(drifts) / len(drifts) if drifts else None,
                "seeds": n,
            }
    return out


def _interval_cell(result: Mapping[str, Any]) -> str:
    """``[-9.1, +1.6]`` in points, or ``-`` without an interval (one seed, or no spread over the seeds)."""
    if result["low"] is None or result["high"] is None:
        return "-"
    return f"[{100 * result['low']:+.1f}, {100 * result['high']:+.1f}]"


def _link(layout: RunLayout, plot: str) -> str:
    """A plot's path relative to the report (Markdown image links)."""
    return layout.plot(plot).relative_to(layout.report.parent).as_posix()


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _seed_results(layout: RunLayout, tag: str, seeds: Sequence[int]) -> dict[int, dict[str, Any]]:
    if tag == "base":
        base = _read(layout.result("base"))
        return dict.fromkeys(seeds, base) if base else {}
    return {s: r for s in seeds if (r := _read(layout.result(tag, s))) and r.get("scores")}


def _mean_over(results: Mapping[int, Mapping[str, Any]], pick: Any) -> tuple[float | None, list[float]]:
    values = [v for r in results.values() if (v := pick(r)) is not None]
    return (sum(values) / len(values) if values else None), values


def _cell(mean: float | None, values: Sequence[float]) -> str:
    if mean is None:
        return "-"
    if len(values) > 1:
        return f"{pct(mean)} ({pct(min(values))}–{pct(max(values))})"
    return pct(mean)


def _member_cells(results: Mapping[str, Mapping[int, Any]], key: str, field: str) -> list[str]:
    """One cell per method of :data:`METHODS` that has results: its ``field`` of suite member ``key``, mean
    over seeds (with the range when several)."""
    cells = []
    for tag, _label in METHODS:
        if results[tag]:
            mean, values = _mean_over(results[tag], lambda r: r["scores"].get(key, {}).get(field))
            cells.append(_cell(mean, values))
    return cells


def _avg(result: Mapping[str, Any], role: str) -> float | None:
    vals = [s["value"] for k, s in result["scores"].items() if result["role"].get(k) == role]
    return sum(vals) / len(vals) if vals else None


def _curve_task_count(curves: Mapping[int, Sequence[Curve]]) -> str:
    counts = {
        n for pair in curves.values() for c in pair for p in c if (n := len(p.get("per_task") or []) or p.get("tasks"))
    }
    return "/".join(str(c) for c in sorted(counts)) or "the"


def _items(layout: RunLayout, tag: str, seed: int, role: str, roles: Mapping[str, str]) -> dict[str, float] | None:
    """Item scores of one evaluation on the members of ``role`` (or, for :data:`LIKELIHOOD_SET`, on the
    likelihood member of that metric)."""
    path = layout.items(layout.result(tag, seed))
    if not path.exists():
        return None
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if role == LIKELIHOOD_SET:
                wanted = roles.get(row["member"]) == "likelihood" and row.get("metric") == LIKELIHOOD_SET
            else:
                wanted = roles.get(row["member"]) == role
            if wanted:
                out[f"{row['member']}::{row['task_id']}"] = min(1.0, float(row["reward"]))
    return out or None


#: in-domain differences against the RL start model: what each method changed from where it started, beside what
#: the placebo changed with zero expected signal; and PivotRL against the placebo and against E2E RL from expert
#: states (outcome reward from the states PivotRL profiles)
START_DIFFERENCES = (
    ("pivot", "start"),
    ("sft", "start"),
    ("e2e", "start"),
    ("e2e-expert-states", "start"),
    ("placebo", "start"),
    ("pivot", "placebo"),
    ("pivot", "e2e-expert-states"),
)


def _differences(
    layout: RunLayout,
    seeds: Sequence[int],
    roles: Mapping[str, str],
    start: str = "base",
    primary: tuple[str, str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Intervals of the differences behind the in-domain and OOD claims, over the seeds x items table of the
    items both models scored in the seeds both have (seeds and items random), each with its minimum detectable
    difference; ``start`` is the RL start model's tag (its in-domain and OOD differences:
    :data:`START_DIFFERENCES`); ``primary`` the config's primary comparison. The in-domain ones are also taken on
    the probability of a credited action when the run scored it (``eval.likelihood``)."""
    out = {}
    from_start = [
        (a, start if b == "start" else b, items)
        for a, b in START_DIFFERENCES
        for items in ("in_domain", LIKELIHOOD_SET)
    ]
    for a, b, role in dict.fromkeys(
        [
            *([primary] if primary else []),
            ("pivot", "sft", "in_domain"),
            ("pivot", "sft-more", "in_domain"),
            ("pivot", "sft", LIKELIHOOD_SET),
            ("pivot", "sft-more", LIKELIHOOD_SET),
            ("pivot", "sft", "ood"),
            ("pivot", "sft-more", "ood"),
            ("sft", "base", "ood"),
            ("pivot", "base", "ood"),
            ("sft", start, "ood"),
            ("pivot", start, "ood"),
            *from_start,
        ]
    ):
        if a == b:
            continue
        pairs = [
            (ia, ib)
            for s in seeds
            if (ia := _items(layout, a, s, role, roles)) and (ib := _items(layout, b, s, role, roles))
        ]
        if pairs:
            try:
                out[f"{a}-vs-{b}-{role}"] = item_difference([p[0] for p in pairs], [p[1] for p in pairs])
            except ValueError:
                continue
    return out


def e2e_turn_cap(layout: RunLayout, config: ExperimentConfig) -> dict[str, Any] | None:
    """``{"max_turns", "longest_plan", "unsolvable"}`` when the E2E section caps its episodes below
    :data:`TURN_CAP_ROOM` times the longest expert plan of its training tasks (``unsolvable``: the tasks whose
    plan is longer than the cap); None when it runs to the env's own limit or leaves that room."""
    cap = config.e2e.get("max_turns")
    if not cap or not layout.expert.exists():
        return None
    plans = {t.task_id: len(t.assistant_turns()) for t in read_trajectories(layout.expert)}
    longest = max(plans.values(), default=0)
    if cap >= TURN_CAP_ROOM * longest:
        return None
    return {"max_turns": cap, "longest_plan": longest, "unsolvable": sorted(t for t, n in plans.items() if n > cap)}


def _budget_lines(
    curves: Mapping[int, tuple[Curve, Curve]], budgets: Sequence[tuple[str, str, bool, str]], name: str
) -> tuple[dict[str, Any], list[str]]:
    """PivotRL against the method ``name`` (``curves``: PivotRL's and its curve of each seed that has both) at each
    matched budget of ``budgets`` (summary key, curve x, profiling counted, label): the summary's results and the
    report's lines."""
    results, lines = {}, []
    pivot, reference = [c[0] for c in curves.values()], [c[1] for c in curves.values()]
    for key, x, profiling, label in budgets:
        try:
            matched = matched_budget(
                pivot, reference, x, profiling=profiling, names=("PivotRL", name), seeds=list(curves)
            )
        except ValueError as exc:
            matched = {"verdict": NOT_MEASURABLE, "error": str(exc)}
        results[key] = matched
        text = (
            f"at {matched['budget']:.4g} {BUDGET_UNITS[x]} (mean over seeds), PivotRL {pct(matched['fast'])}% vs "
            f"{name} {pct(matched['reference'])}%; PivotRL − {name} {difference_text(matched, 'tasks')}"
            if "diff" in matched
            else difference_text(matched)
        )
        lines.append(f"- **{label}**: {text}.")
    return results, lines


def stage_seconds(timings: Mapping[str, float]) -> dict[str, float]:
    """Seconds per stage, in pipeline order, from the timings file's seconds per stage run (``pivot-s0``; a
    folder written before runs were kept apart holds stage totals, ``pivot``, which count as they are)."""
    out: dict[str, float] = {}
    for key, seconds in timings.items():
        stage = match.group(1) if (match := re.fullmatch(r"(.+)-s\d+", key)) and match.group(1) in STAGES else key
        out[stage] = out.get(stage, 0.0) + seconds
    return {stage: out[stage] for stage in [*STAGES, *sorted(set(out) - set(STAGES))] if stage in out}


def write_experiment_report(layout: RunLayout | str | Path, config: ExperimentConfig) -> dict[str, Any]:
    """Assemble ``report.md`` (and ``summary.json``, PNGs in ``plots/``) from a run folder."""
    if not isinstance(layout, RunLayout):
        layout = RunLayout(layout)
    seeds = list(config.seeds)
    seed_text = ", ".join(str(s) for s in seeds)
    results = {tag: _seed_results(layout, tag, seeds) for tag, _ in METHODS + ABLATIONS}
    base = results["base"].get(seeds[0]) if results["base"] else None
    summary: dict[str, Any] = {
        "name": config.name,
        "env": config.env,
        "model": config.model,
        "seeds": seeds,
        "report": str(layout.report),
        "methods": {},
        "efficiency": {},
        "ablation": {},
        "budget": {},
        "accounting": {},
    }
    lines = [
        f"# pivotgym experiment `{config.name}`",
        "",
        f"Target domain `{config.env}`, base model `{config.model}`, seeds {seed_text}. Every number below "
        "comes from this run's files under this folder (`eval/*.json`, `train/*/curve.json`, `data/*`). "
        "Scores in %; with several seeds a cell shows the mean (min–max). PivotRL and E2E RL start from "
        + (
            "the base model, like SFT (the paper's comparison)."
            if config.rl_init == "base"
            else "the warm-up model, like SFT and continued SFT (`rl_init: warmup`: format SFT on "
            f"{config.warmup_tasks} expert trajectories that no method trains on; it also profiles the turns, "
            "so the pivots are not its own training turns). The same-data comparison is against the warm-up row."
            if config.rl_init == "warmup"
            else "the SFT model (`rl_init: sft`, for a base model whose samples rarely pass the verifier, so "
            "that profiling finds pivots and RL has a signal); their deltas therefore include SFT's."
        ),
        "",
    ]

    # ---- main table
    turns = config.curve.metric == "turns"
    episodes = any(_avg(r, "episodes") is not None for res in results.values() for r in res.values())
    rows = []
    for tag, label in METHODS:
        res = results[tag]
        if not res:
            continue
        ind, ind_v = _mean_over(res, lambda r: _avg(r, "in_domain"))
        ood, ood_v = _mean_over(res, lambda r: _avg(r, "ood"))
        base_ood, base_ind = (_avg(base, "ood"), _avg(base, "in_domain")) if base else (None, None)
        d_ood = None if ood is None or base_ood is None else ood - base_ood
        d_ind = None if ind is None or base_ind is None else ind - base_ind
        used = "-" if tag == "base" else seed_list(res)
        row = [label, _cell(ind, ind_v), "-" if d_ind is None else f"{100 * d_ind:+.1f}"]
        if episodes:
            epi, epi_v = _mean_over(res, lambda r: _avg(r, "episodes"))
            row.append(_cell(epi, epi_v))
            summary.setdefault("episodes", {})[tag] = epi
        rows.append(row + [_cell(ood, ood_v), "-" if d_ood is None else f"{100 * d_ood:+.1f}", used])
        summary["methods"][tag] = {
            "in_domain": ind,
            "ood": ood,
            "delta_in_domain": d_ind,
            "delta_ood": d_ood,
            "seeds": list(res),
            "per_seed_in_domain": ind_v,
            "per_seed_ood": ood_v,
        }
    floors = _read(layout.floors) if turns else None
    candidates = bool(floors and floors.get("action_set") == "candidate")
    if floors and "metrics" in floors:
        summary["floors"] = floors["metrics"]
        width = len(rows[0]) if rows else 0
        floor = floor_label(floors.get("action_set", "legal"))
        for key, label in (("random_legal", floor), ("expert", "expert action (ceiling)")):
            value = floors["metrics"][key]["mean"]
            rows.append([label, pct(value)] + ["-"] * (width - 2))
    in_domain_label = "in-domain turn accuracy" if turns else "in-domain"
    header = (
        ["model", in_domain_label, "Δ vs base"]
        + (["episode success"] if episodes else [])
        + ["OOD avg", "Δ OOD vs base", "seeds"]
    )
    lines += ["## Base / SFT / PivotRL / E2E RL", ""]
    if turns:
        lines += [
            "In-domain **turn accuracy**: on every expert state of the held-out test tasks (the turns of their "
            "expert trajectories, never trained on), the share where the model's greedy action passes the "
            "functional verifier, averaged per task and then over tasks. It is PivotRL's unit of training "
            "measured on unseen states, so it can move before whole episodes do"
            + ("; *episode success* is one greedy episode per test task, judged by the env." if episodes else "."),
            "",
        ]
    lines += [markdown_table(header, rows), ""]
    if floors and "metrics" in floors:
        fm = floors["metrics"]

        kind = "candidate" if candidates else "legal"

        def ci(key: str) -> str:
            low, high = fm[key]["low"], fm[key]["high"]
            return "" if low is None else f" [{pct(low)}, {pct(high)}]"

        lines += [
            f"Floors on the same {floors['judged_states']} held-out states of {floors['problems']} problems "
            f"(`eval/floors.json`): a uniformly random {kind} action scores **{pct(fm['random_legal']['mean'])}%**"
            f"{ci('random_legal')}, the expert's own action {pct(fm['expert']['mean'])}%; the verifier credits "
            f"two or more distinct {kind} actions at {pct(fm['multi_credit']['mean'])}%{ci('multi_credit')} of "
            f"states ({fm['legal']['mean']:.2f} {kind} and {fm['credited']['mean']:.2f} credited actions per state "
            "on average; 95% t intervals over problems). Where that share is near 0, the functional verifier "
            "credits what exact match credits and cannot show its value."
            + (
                f" The env has no finite set of legal actions, so these floors judge its candidate actions "
                f"({floors.get('action_set_description') or 'the env names them'}): the floor is that naive "
                "policy's score, not a random legal action's."
                if candidates
                else ""
            ),
            "",
        ]
    elif floors:
        lines += [f"No floors: {floors.get('unsupported')}.", ""]
    acc_rows, summary["accounting"] = accounting_table(layout, seeds)
    if acc_rows:
        lines += [
            "### What each method spent",
            "",
            "Mean over seeds. "
            + (
                "Continued SFT trains the SFT model further so that its optimiser steps from the base model equal "
                "PivotRL's; "
                if any(row[0] == METHOD_LABELS["sft-more"] for row in acc_rows)
                else ""
            )
            + "E2E RL samples only the tasks that have expert trajectories. Rollout "
            "turns count every generated training turn (PivotRL: its profiling samples too); wall-clock "
            "excludes evaluation and includes PivotRL's profiling. An RL step with too few informative groups "
            "is skipped (`min_informative_groups`), so applied steps can be fewer than configured ones.",
            "",
            markdown_table(
                [
                    "method",
                    "starts from",
                    "data",
                    "optimiser steps applied",
                    "steps from base",
                    "tokens trained from base",
                    "rollout turns",
                    "wall-clock s",
                    "wall-clock s from base",
                ],
                acc_rows,
            ),
            "",
        ]
    if base:
        start = rl_start_stage(config.rl_init)
        summary["rl_start"] = start
        summary["primary"] = config.primary
        summary["differences"] = _differences(
            layout, seeds, base.get("role", {}), start, parse_comparison(config.primary)
        )
        pairs = [(a, start if b == "start" else b) for a, b in START_DIFFERENCES]
        moved = [
            f"- {METHOD_LABELS[a]} − {METHOD_LABELS[b]}{label}: {difference_text(d, 'test tasks', verdict=False)}"
            for items, label in (("in_domain", ""), (LIKELIHOOD_SET, ", P(credited action)"))
            for a, b in pairs
            if (d := summary["differences"].get(f"{a}-vs-{b}-{items}"))
        ]
        if moved:
            lines += [
                f"### What each method changed in-domain (from the {METHOD_LABELS[start]} model they start from; "
                "seeds and test tasks random)",
                "",
                *moved,
                "",
            ]

    # ---- per-env table
    if base:
        keys = list(base["scores"])
        labels = [label for tag, label in METHODS if results[tag]]
        header = ["env", "role", "metric", "n"] + labels
        env_rows = [
            [key, base["role"].get(key, ""), base["scores"][key]["metric"], base["scores"][key]["n"]]
            + _member_cells(results, key, "value")
            for key in keys
        ]
        lines += [
            "### Per environment",
            "",
            markdown_table(header, env_rows),
            "",
            "95% confidence intervals per env and model are in `eval/*.json` (`ci95`).",
            "",
        ]
        parsed = [k for k in keys if base["scores"][k].get("parse_rate") is not None]
        if parsed:  # is a gain a format effect? the share of replies with a readable answer, per model
            parse_rows = [[key] + _member_cells(results, key, "parse_rate") for key in parsed]
            lines += [
                "Parse rate (% of replies from which an answer could be read; a score gain with a parse-rate gain "
                "may be a format effect):",
                "",
                markdown_table(["env"] + labels, parse_rows),
                "",
            ]

    # ---- efficiency
    curves = {s: (_read(layout.curve("pivot", s)) or [], _read(layout.curve("e2e", s)) or []) for s in seeds}
    named_turns: dict[str, Curve] = {}
    for s, (pc, ec) in curves.items():
        suffix = f" (seed {s})" if len(seeds) > 1 else ""
        named_turns[f"PivotRL{suffix}"] = pc
        named_turns[f"E2E RL{suffix}"] = ec
    if any(c for pair in curves.values() for c in pair):
        # one seed: E2E's final score as the target line; several: each seed has its own, so none is drawn
        target = curves[seeds[0]][1][-1]["score"] if len(seeds) == 1 and curves[seeds[0]][1] else None
        score = "turn accuracy" if turns else "in-domain score"
        plot_curves(
            named_turns,
            layout.plot("curve_turns"),
            x="turns",
            xlabel="rollout turns (incl. profiling)",
            ylabel=score,
            title=f"{config.env}: {score} vs rollout turns",
            target=target,
        )
        plot_curves(
            named_turns,
            layout.plot("curve_seconds"),
            x="seconds",
            xlabel="wall-clock seconds (excl. eval)",
            ylabel=score,
            title=f"{config.env}: {score} vs wall-clock",
            target=target,
        )
        lines += [
            "## Cost: PivotRL vs end-to-end RL",
            "",
            (
                f"In-domain turn accuracy (greedy action from the held-out expert states of "
                f"{_curve_task_count(curves)} test tasks)"
                if turns
                else f"In-domain score (one greedy episode on each of {_curve_task_count(curves)} test tasks)"
            )
            + " at every point of its learning curve (`curve`). PivotRL's curve starts at the cost of profiling: "
            "every profiling sample counts as a rollout turn and the profiling time is added to its wall-clock.",
            "",
            f"![score vs turns]({_link(layout, 'curve_turns')}) "
            f"![score vs wall-clock]({_link(layout, 'curve_seconds')})",
            "",
        ]
        if cap := e2e_turn_cap(layout, config):
            summary["e2e_turn_cap"] = cap
            lines += [f"**{held_back_text(cap)}**", ""]
        summary["budget"], budget_lines = _budget_lines(
            {s: (pc, ec) for s, (pc, ec) in curves.items() if pc and ec}, BUDGETS, "E2E RL"
        )
        lines += budget_lines
        lines += [
            "",
            "Each method is scored at the same budget: the smaller of the two methods' final costs in each seed, "
            "its per-task scores interpolated between the two curve points around that budget. Where a method "
            "has no curve point other than its start inside the budget, the comparison is not measurable (its "
            "score there would be its start model's). The interval counts seeds and tasks as random (the seeds x "
            "tasks table of differences), beside the smallest difference this design detects with 80% power. "
            "The paper does not count profiling; the second row leaves it out. Per seed, the cost to reach "
            "E2E's final score:",
            "",
        ]
        for s, (pc, ec) in curves.items():
            by_turns, by_secs = reach_ratio(pc, ec, "turns"), reach_ratio(pc, ec, "seconds")
            summary["efficiency"][str(s)] = {
                "turns": by_turns,
                "seconds": by_secs,
                "pivot_final": pc[-1]["score"] if pc else None,
                "e2e_final": ec[-1]["score"] if ec else None,
                "pivot_turns": pc[-1]["turns"] if pc else None,
                "e2e_turns": ec[-1]["turns"] if ec else None,
            }
            if by_turns.get("target") is not None and not by_turns.get("reference"):  # E2E's curve stayed flat
                lines += [
                    f"- seed {s}: {ratio_text(by_turns, 'turns')}; final scores PivotRL "
                    f"{pct(pc[-1]['score'] if pc else None)}%, E2E RL {pct(ec[-1]['score'])}%."
                ]
            else:
                lines += [
                    f"- seed {s}: rollout turns — {ratio_text(by_turns, 'turns')}; "
                    f"wall-clock — {ratio_text(by_secs, 's')}."
                ]
        lines.append("")

    # ---- claim (b) along the budgets: PivotRL against SFT, both from the same start model
    sft_curves = {s: (curves[s][0] if s in curves else [], _read(layout.curve("sft", s)) or []) for s in seeds}
    along = {s: (pc, sc) for s, (pc, sc) in sft_curves.items() if pc and sc}
    if along:
        lines += [
            "## PivotRL vs SFT along their budgets",
            "",
            "Claim (b) at every budget both methods reached, not at their two final points: each method's "
            "per-task scores interpolated inside its own learning curve at the smaller of the two final costs, "
            "per seed (PivotRL's seconds include profiling).",
            "",
        ]
        summary["budget_sft"], budget_lines = _budget_lines(along, SFT_BUDGETS, "SFT")
        lines += budget_lines
        lines.append("")

    # ---- uninformative turns
    selects = {s: sel for s in seeds if (sel := _read(layout.selection("functional", s)))}
    if selects:
        k = config.profile.k
        per_seed = {s: sel["stats"]["per_env"].get("all", {}) for s, sel in selects.items()}
        kinds = {"all fail": "all_fail", "all pass": "all_pass", "informative": "informative", "pivots": "pivots"}
        shares = {
            label: sum(st.get(key, 0) / max(1, st.get("turns", 0)) for st in per_seed.values()) / len(per_seed)
            for label, key in kinds.items()
        }
        share, share_v = _mean_over(per_seed, lambda st: st.get("share_uninformative"))
        plot_bars(
            shares,
            layout.plot("turn_shares"),
            ylabel="share of expert turns",
            percent=True,
            title=f"profiled turns (K={k}, mean of {len(per_seed)} seed(s))",
        )
        rule = next(iter(selects.values()))["rule"]
        summary["uninformative"] = {
            "share": share,
            "per_seed": {str(s): st.get("share_uninformative") for s, st in per_seed.items()},
            "pivots": {str(s): st.get("pivots") for s, st in per_seed.items()},
            "rule": rule,
        }
        detail = "; ".join(
            f"seed {s}: {pct(st.get('share_uninformative'))}% of {st.get('turns', 0)} turns "
            f"({st.get('all_fail', 0)} all fail, {st.get('all_pass', 0)} all pass), "
            f"{st.get('pivots', 0)} pivots"
            for s, st in per_seed.items()
        )
        lines += [
            "## Uninformative turns",
            "",
            f"Expert turns profiled with K={k} samples from the frozen reference (the RL start model of each "
            f"seed): **{pct(share)}%** carry no signal (every sample fails or every sample passes)"
            + (f", {pct(min(share_v))}–{pct(max(share_v))}% across seeds" if len(share_v) > 1 else "")
            + f". {detail}. Pivots pass the rule var > {rule.get('min_var', 0)} and mean < "
            f"{rule.get('max_mean')}. The paper reports ~71% uninformative.",
            "",
            f"![turn shares]({_link(layout, 'turn_shares')})",
            "",
        ]

    # ---- ablation
    abl_rows, abl_vals, abl_err = [], {}, {}
    for tag, label in ABLATIONS:
        res = results[tag]
        if tag == "e2e" and not (results["e2e-progress"] or results["e2e-expert-states"]):
            continue  # the main E2E row stands beside its variants only
        if res:
            m, v = _mean_over(res, lambda r: _avg(r, "in_domain"))
            if m is not None:
                abl_vals[label] = m
                abl_err[label] = [min(v), max(v)]
                abl_rows.append([label, _cell(m, v), seed_list(res)])
                summary["ablation"][tag] = {"in_domain": m, "per_seed": v}
    if len(abl_vals) > 1:
        plot_bars(
            abl_vals,
            layout.plot("ablation"),
            ylabel="in-domain score",
            percent=True,
            title="ablation: which turns, which reward",
            errors=abl_err if len(seeds) > 1 else None,
        )
        exact = {s: sel["pivots"] for s in seeds if (sel := _read(layout.selection("exact", s)))}
        note = (
            (" The exact-match profile selected " + ", ".join(f"{n} (seed {s})" for s, n in exact.items()) + " pivots.")
            if exact
            else ""
        )
        lines += [
            "## Ablation",
            "",
            "Same trainer and budget; *random turns* trains on as many randomly chosen profiled turns as "
            "there are pivots; *exact-match reward* profiles, selects and trains with the exact-match "
            "verifier instead of the functional one; the *placebo* trains on the pivots with advantages shuffled "
            "inside each group, so it should change nothing; *E2E RL, progress reward* is E2E RL rewarded by the "
            "env's partial progress at the episode's end, beside the outcome-reward E2E RL; *E2E RL, from expert "
            "states* is outcome-reward E2E RL whose episodes start from states of the expert trajectories (the "
            f"states PivotRL profiles, turn drawn uniformly per group; the expert's actions up to it replayed).{note}",
            "",
            markdown_table(["variant", "in-domain", "seeds"], abl_rows),
            "",
            f"![ablation]({_link(layout, 'ablation')})",
            "",
        ]

    # ---- harm check
    summary["harm"] = harm = harm_check(layout, seeds)
    if harm:
        lines += [
            "## Does RL do harm?",
            "",
            "Greedy pass rate on profiled training turns that were *not* selected as pivots (the trainer's "
            "`non_pivot_eval` states), at the first and the last evaluation, and the RMS distance of the weights "
            "from the start after the last step. The placebo trains on the same pivots with advantages shuffled "
            "inside each group (zero expected signal): what it changes, the optimiser settings change alone. The "
            "interval is a paired t over seeds of each seed's change (the trainers log one pass rate per seed); "
            "none with one seed, or when every seed changed by the same amount (no spread to build it on).",
            "",
            markdown_table(
                [
                    "run",
                    "non-pivot pass at start",
                    "at end",
                    "Δ points",
                    "95% t over seeds",
                    "detectable (80% power)",
                    "weight drift (RMS)",
                    "seeds",
                ],
                [
                    [
                        METHOD_LABELS[tag],
                        pct(h["start"]),
                        pct(h["end"]),
                        f"{100 * h['delta']:+.1f}",
                        _interval_cell(h["interval"]),
                        "-" if h["interval"]["mdd"] is None else f"{100 * h['interval']['mdd']:.1f}",
                        "-" if h["drift_rms"] is None else f"{h['drift_rms']:.2e}",
                        h["seeds"],
                    ]
                    for tag, h in harm.items()
                ],
            ),
            "",
        ]

    # ---- claims
    lines += ["## The paper's claims at this scale", ""] + claims(summary) + [""]
    timings = stage_seconds(_read(layout.timings) or {})
    if timings:
        lines += [
            "## Run time",
            "",
            markdown_table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in timings.items()]),
            f"\nTotal: {sum(timings.values()) / 60:.1f} min.",
            "",
        ]
    recorded = _read(layout.config) or {}
    provenance = recorded.get("provenance")
    if provenance:
        stage_code = _stage_code(layout, config.seeds)
        summary["provenance"] = {**provenance, "stage_code": stage_code}
        lines += [
            "## Provenance",
            "",
            "What these numbers depend on besides the config (also in `config.json`, and per stage in `stages/`):",
            "",
            *stage_code_lines(stage_code),
            *provenance_lines(provenance),
            "",
        ]
    lines += ["## Reproduce", "", "```bash", f"pivotgym experiment {config.path or 'CONFIG.yaml'}", "```", ""]
    layout.report.write_text("\n".join(lines), encoding="utf-8")
    write_summary(layout.summary, summary)
    return summary


def _stage_code(layout: RunLayout, seeds: Iterable[int]) -> list[dict[str, Any]]:
    """Each code revision that computed a finished stage of the run, with those stages (``warmup-s0``, ...), in
    stage order; a stage recorded before records named their code counts as ``unknown``."""
    groups: dict[tuple[Any, Any], list[str]] = {}
    for stage, seed in stage_plan(seeds):
        path = layout.record(stage, seed)
        record = StageRecord.read(path)
        if record is None or record.status != "done":
            continue
        code = record.code or {}
        key = (code.get("revision", UNKNOWN), code.get("dirty", UNKNOWN))
        groups.setdefault(key, []).append(path.stem)  # the stage run's name: warmup-s0, base
    return [{"revision": rev, "dirty": dirty, "stages": stages} for (rev, dirty), stages in groups.items()]
