"""Reports: Markdown tables and PNG plots (matplotlib, Agg backend: no display needed).

Small building blocks the experiment pipeline assembles into ``runs/<name>/report.md``: learning curves
(score against rollout turns or wall-clock, with a dashed target line), bar charts with error bars, Markdown
tables, and the "cost to reach a target score" arithmetic behind the paper's efficiency claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Curve = Sequence[Mapping[str, float]]  # points with "turns", "seconds", "score"

COLORS = {"PivotRL": "#1f77b4", "E2E RL": "#d62728", "SFT": "#2ca02c", "continued SFT": "#98df8a",
          "base": "#7f7f7f"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def time_to_reach(curve: Curve, target: float, x: str = "turns") -> float | None:
    """The cost (``x`` of the first point) at which ``curve`` first scores at least ``target``; None if never."""
    for point in curve:
        if point["score"] >= target - 1e-12:
            return float(point[x])
    return None


def reach_ratio(fast: Curve, reference: Curve, x: str = "turns") -> dict[str, Any]:
    """How much of ``reference``'s cost ``fast`` needs to match ``reference``'s final score.

    Returns ``{"target", "fast", "reference", "ratio"}``: ``ratio`` = reference cost / fast cost (> 1 means
    ``fast`` got there cheaper), None when ``fast`` never reaches the target or either cost is 0.
    """
    if not reference or not fast:
        return {"target": None, "fast": None, "reference": None, "ratio": None}
    target = float(reference[-1]["score"])
    ref_cost = time_to_reach(reference, target, x)
    fast_cost = time_to_reach(fast, target, x)
    ratio = ref_cost / fast_cost if ref_cost and fast_cost else None
    return {"target": target, "fast": fast_cost, "reference": ref_cost, "ratio": ratio}


def plot_curves(curves: Mapping[str, Curve], path: str | Path, *, x: str = "turns", xlabel: str = "rollout turns",
                ylabel: str = "in-domain score", title: str = "", target: float | None = None) -> Path:
    """Line plot of several learning curves against ``x``; ``target`` draws a dashed horizontal line.

    A curve named ``"METHOD (seed N)"`` takes its method's colour and its seed's line style and marker, so the
    seeds of one method stay apart."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]
    variants: dict[str, int] = {}
    for name, curve in curves.items():
        if curve:
            method, _, variant = name.partition(" (")
            line, marker = styles[variants.setdefault(variant, len(variants)) % len(styles)]
            ax.plot([p[x] for p in curve], [p["score"] for p in curve], marker=marker, linestyle=line, label=name,
                    color=COLORS.get(method))
    if target is not None:
        ax.axhline(target, linestyle="--", color="#555555", linewidth=1, label=f"target {target:.2f}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_bars(values: Mapping[str, float], path: str | Path, *, ylabel: str = "", title: str = "",
              errors: Mapping[str, Sequence[float]] | None = None, percent: bool = False) -> Path:
    """Bar chart of named values; ``errors`` maps a name to a ``[low, high]`` interval drawn as an error bar."""
    plt = _pyplot()
    names = list(values)
    heights = [float(values[n]) for n in names]
    fig, ax = plt.subplots(figsize=(max(4, 1.3 * len(names) + 2), 4), dpi=110)
    yerr = None
    if errors:
        yerr = [[max(0.0, h - errors.get(n, (h, h))[0]) for n, h in zip(names, heights)],
                [max(0.0, errors.get(n, (h, h))[1] - h) for n, h in zip(names, heights)]]
    bars = ax.bar(names, heights, yerr=yerr, capsize=4, color=[COLORS.get(n, "#9467bd") for n in names])
    for bar, h in zip(bars, heights):
        ax.annotate(f"{100 * h:.0f}%" if percent else f"{h:.2f}", (bar.get_x() + bar.get_width() / 2, h),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are converted with ``str``."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pct(value: float | None, digits: int = 1) -> str:
    """``0.4321`` -> ``43.2``; None -> ``-``."""
    return "-" if value is None else f"{100 * value:.{digits}f}"


def ratio_text(ratio: Mapping[str, Any], unit: str) -> str:
    """One sentence for a :func:`reach_ratio` result."""
    if ratio.get("target") is None:
        return "not measured"
    if ratio.get("fast") is None:
        return f"PivotRL did not reach E2E's final score ({pct(ratio['target'])}%) within its budget"
    if not ratio.get("reference"):
        return (f"not measurable: E2E RL never rose above its start score ({pct(ratio['target'])}%), so it has no "
                "cost to reach it")
    if not ratio.get("ratio"):
        return f"PivotRL reached {pct(ratio['target'])}% at {ratio['fast']:.0f} {unit} (E2E: {ratio['reference']:.0f})"
    return (f"PivotRL reached E2E's final score ({pct(ratio['target'])}%) after {ratio['fast']:.0f} {unit} vs "
            f"E2E's {ratio['reference']:.0f}: **{ratio['ratio']:.2f}x** fewer")


# ----------------------------------------------------------------------------------------- uncertainty
#: a claim's verdicts: the bootstrap interval of the cost ratio lies above 1x, below 1x, or straddles it
REPRODUCED, CONTRADICTED, NOT_MEASURABLE = "reproduced", "contradicted", "not measurable at this scale"


def _mean_curve(curves: Sequence[Curve], seeds: Sequence[int], tasks: Sequence[int], x: str) -> list[dict[str, float]]:
    """Average of the curves ``seeds`` (indices into ``curves``, repeats allowed) over the task indices
    ``tasks`` (repeats allowed): point i has the mean ``x`` and the mean per-task score of point i."""
    length = min(len(curves[s]) for s in seeds)
    out = []
    for i in range(length):
        xs = [float(curves[s][i][x]) for s in seeds]
        scores = [float(curves[s][i]["per_task"][t]) for s in seeds for t in tasks]
        out.append({x: sum(xs) / len(xs), "score": sum(scores) / len(scores)})
    return out


def cost_ratio(fast: Sequence[Curve], reference: Sequence[Curve], x: str = "turns",
               seeds: Sequence[int] | None = None, tasks: Sequence[int] | None = None) -> float:
    """``reference``'s cost / ``fast``'s cost to reach ``reference``'s final score, on curves averaged over
    ``seeds`` and ``tasks`` (default: all).

    ``fast`` never reaching the target gives 0 (infinitely costlier). A reference that never rises above its
    own start score has no cost to beat (it "reaches" its target at its first point): that counts as 1x, no
    evidence either way, so a flat or identical pair of curves can never look like a speed-up."""
    seeds = list(range(len(reference))) if seeds is None else list(seeds)
    tasks = list(range(len(reference[0][0]["per_task"]))) if tasks is None else list(tasks)
    ref, fst = _mean_curve(reference, seeds, tasks, x), _mean_curve(fast, seeds, tasks, x)
    target = ref[-1]["score"]
    if ref[0]["score"] >= target - 1e-12:
        return 1.0
    ref_cost, fast_cost = time_to_reach(ref, target, x), time_to_reach(fst, target, x)
    if fast_cost is None:
        return 0.0
    if not fast_cost:  # fast reached the target at no cost while the reference needed some
        return float("inf")
    return float(ref_cost) / fast_cost  # type: ignore[arg-type]


def check_curves(fast: Sequence[Curve], reference: Sequence[Curve]) -> int:
    """The number of curve tasks, after checking that every point of every curve scores the same tasks
    (``per_task``) and that both methods have one curve per seed; raises ValueError naming what differs."""
    if not fast or len(fast) != len(reference):
        raise ValueError(f"need one curve per seed for both methods, got {len(fast)} and {len(reference)}")
    sizes = {len(p.get("per_task") or []) for c in (*fast, *reference) for p in c}
    if len(sizes) != 1 or 0 in sizes or any(not c for c in (*fast, *reference)):
        raise ValueError(f"every curve point needs per_task scores on the same tasks; task counts seen {sorted(sizes)}"
                         " (rerun the pivot and e2e stages: older curve.json files lack per_task)")
    return sizes.pop()


def bootstrap_cost_ratio(fast: Sequence[Curve], reference: Sequence[Curve], x: str = "turns", *,
                         resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """:func:`cost_ratio` with a percentile bootstrap interval over tasks and seeds.

    ``fast[i]`` and ``reference[i]`` are seed i's curves, each point carrying ``per_task`` scores on the same
    curve tasks. Every resample draws seeds with replacement, then tasks with replacement (the same draw for
    both methods: the comparison is paired), and recomputes the ratio. The verdict is :data:`REPRODUCED`
    only when the whole interval lies above 1x, :data:`CONTRADICTED` when it lies below, otherwise
    :data:`NOT_MEASURABLE` (the data cannot tell the methods apart)."""
    import random

    n_tasks = check_curves(fast, reference)
    n_seeds = len(reference)
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        seeds = [rng.randrange(n_seeds) for _ in range(n_seeds)]
        tasks = [rng.randrange(n_tasks) for _ in range(n_tasks)]
        draws.append(cost_ratio(fast, reference, x, seeds, tasks))
    draws.sort()
    lo = draws[int((1 - level) / 2 * (resamples - 1))]
    hi = draws[int((1 + level) / 2 * (resamples - 1))]
    verdict = REPRODUCED if lo > 1.0 else CONTRADICTED if hi < 1.0 else NOT_MEASURABLE
    return {"ratio": cost_ratio(fast, reference, x), "low": lo, "high": hi, "level": level,
            "resamples": resamples, "seeds": n_seeds, "tasks": n_tasks, "verdict": verdict}


def bootstrap_mean_difference(a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]], *,
                              resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Mean score of ``a`` minus ``b`` with a paired percentile bootstrap over seeds, then items.

    ``a[i]`` and ``b[i]`` map item ids to scores for seed i; only items present in every mapping count.
    The verdict is :data:`REPRODUCED` when the interval lies above 0, :data:`CONTRADICTED` below, otherwise
    :data:`NOT_MEASURABLE`."""
    import random

    if not a or len(a) != len(b):
        raise ValueError(f"need one item mapping per seed for both models, got {len(a)} and {len(b)}")
    items = sorted(set.intersection(*(set(m) for m in (*a, *b))))
    if not items:
        raise ValueError("the two models share no scored items")

    def diff(seeds: Sequence[int], picks: Sequence[str]) -> float:
        return sum(a[s][i] - b[s][i] for s in seeds for i in picks) / (len(seeds) * len(picks))

    rng = random.Random(seed)
    draws = sorted(diff([rng.randrange(len(a)) for _ in a], [items[rng.randrange(len(items))] for _ in items])
                   for _ in range(resamples))
    lo, hi = draws[int((1 - level) / 2 * (resamples - 1))], draws[int((1 + level) / 2 * (resamples - 1))]
    verdict = REPRODUCED if lo > 0 else CONTRADICTED if hi < 0 else NOT_MEASURABLE
    return {"diff": diff(range(len(a)), items), "low": lo, "high": hi, "level": level, "items": len(items),
            "seeds": len(a), "verdict": verdict}


def interval_text(result: Mapping[str, Any]) -> str:
    """``1.40x [0.80x, 2.10x] (95%, 5 tasks x 3 seeds): not measurable at this scale``."""
    def x(v: float) -> str:
        return "never" if v == 0 else "inf" if v == float("inf") else f"{v:.2f}x"

    return (f"{x(result['ratio'])} [{x(result['low'])}, {x(result['high'])}] ({100 * result['level']:.0f}% bootstrap, "
            f"{result['tasks']} tasks x {result['seeds']} seed(s)): **{result['verdict']}**")


__all__ = ["CONTRADICTED", "NOT_MEASURABLE", "REPRODUCED", "bootstrap_cost_ratio", "bootstrap_mean_difference", "check_curves", "cost_ratio",
           "interval_text", "markdown_table", "pct", "plot_bars", "plot_curves", "ratio_text", "reach_ratio",
           "time_to_reach"]


# ----------------------------------------------------------------------------------------- experiment report
METHODS = (("base", "base"), ("sft", "SFT"), ("sft-more", "continued SFT"), ("pivot", "PivotRL"),
           ("e2e", "E2E RL"))
ABLATIONS = (("pivot", "PivotRL (pivots, functional)"), ("random-turns", "random turns"),
             ("exact-reward", "exact-match reward"))


def _read(path: Path) -> Any:
    import json

    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _seed_results(root: Path, tag: str, seeds: Sequence[int]) -> dict[int, dict[str, Any]]:
    if tag == "base":
        base = _read(root / "eval" / "base.json")
        return {s: base for s in seeds} if base else {}
    return {s: r for s in seeds if (r := _read(root / "eval" / f"{tag}-s{s}.json")) and r.get("scores")}


def _mean_over(results: Mapping[int, Mapping[str, Any]], pick: Any) -> tuple[float | None, list[float]]:
    values = [v for r in results.values() if (v := pick(r)) is not None]
    return (sum(values) / len(values) if values else None), values


def _cell(mean: float | None, values: Sequence[float]) -> str:
    if mean is None:
        return "-"
    if len(values) > 1:
        return f"{pct(mean)} ({pct(min(values))}–{pct(max(values))})"
    return pct(mean)


def _avg(result: Mapping[str, Any], role: str) -> float | None:
    vals = [s["value"] for k, s in result["scores"].items() if result["role"].get(k) == role]
    return sum(vals) / len(vals) if vals else None


def _curve_task_count(curves: Mapping[int, Sequence[Curve]]) -> str:
    counts = {len(p.get("per_task") or []) or p.get("tasks") for pair in curves.values() for c in pair for p in c}
    counts.discard(None)
    return "/".join(str(c) for c in sorted(counts)) or "the"


def _items(root: Path, tag: str, seed: int, role: str, roles: Mapping[str, str]) -> dict[str, float] | None:
    """Item scores of one evaluation (``eval/<tag>-s<seed>.json.items.jsonl``) on the members of ``role``."""
    import json

    name = "base.json" if tag == "base" else f"{tag}-s{seed}.json"
    path = root / "eval" / (name + ".items.jsonl")
    if not path.exists():
        return None
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if roles.get(row["member"]) == role:
                out[f"{row['member']}::{row['task_id']}"] = min(1.0, float(row["reward"]))
    return out or None


def _differences(root: Path, seeds: Sequence[int], roles: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Paired bootstrap differences behind the in-domain and OOD claims (over the seeds both models have)."""
    out = {}
    for a, b, role in (("pivot", "sft", "in_domain"), ("pivot", "sft-more", "in_domain"), ("pivot", "sft", "ood"),
                       ("pivot", "sft-more", "ood"), ("sft", "base", "ood"), ("pivot", "base", "ood")):
        pairs = [(ia, ib) for s in seeds
                 if (ia := _items(root, a, s, role, roles)) and (ib := _items(root, b, s, role, roles))]
        if pairs:
            try:
                out[f"{a}-vs-{b}-{role}"] = bootstrap_mean_difference([p[0] for p in pairs], [p[1] for p in pairs])
            except ValueError:
                continue
    return out


ACCOUNTING = (("sft", "SFT"), ("sft-more", "continued SFT"), ("pivot", "PivotRL"), ("e2e", "E2E RL"))


def _accounting(root: Path, seeds: Sequence[int]) -> tuple[list[list[Any]], dict[str, Any]]:
    """Rows of the side-by-side cost table (mean over seeds) from ``train/*/accounting.json``; "from base"
    adds SFT's cost to a run that starts from the SFT model."""
    def mean(rows: Sequence[Mapping[str, Any]], key: str) -> float:
        return sum(float(r[key]) for r in rows) / len(rows)

    table, data = [], {}
    sft_rows = [r for s in seeds if (r := _read(root / "train" / f"sft-s{s}" / "accounting.json"))]
    for tag, label in ACCOUNTING:
        rows = [r for s in seeds if (r := _read(root / "train" / f"{tag}-s{s}" / "accounting.json"))]
        if not rows:
            continue
        from_sft = str(rows[0].get("start", "")).lower() == "sft" and bool(sft_rows)
        row = {k: mean(rows, k) for k in ("optimizer_steps", "tokens_trained", "rollout_turns", "wall_seconds")}
        total = {k: row[k] + (mean(sft_rows, k) if from_sft else 0.0) for k in row}
        data[tag] = {**row, "from_base": total, "start": rows[0].get("start"), "data": rows[0].get("data"),
                     "seeds": len(rows)}
        table.append([label, rows[0].get("start"), rows[0].get("data"), f"{row['optimizer_steps']:.0f}",
                      f"{total['optimizer_steps']:.0f}", f"{total['tokens_trained']:.0f}",
                      f"{row['rollout_turns']:.0f}", f"{row['wall_seconds']:.0f}", f"{total['wall_seconds']:.0f}"])
    return table, data


def write_experiment_report(root: str | Path, config: Any) -> dict[str, Any]:
    """Assemble ``root/report.md`` (and ``summary.json``, PNGs in ``root/plots``) from a finished run."""
    import json

    root = Path(root)
    seeds = list(config.seeds)
    seed_text = ", ".join(str(s) for s in seeds)
    plots = root / "plots"
    results = {tag: _seed_results(root, tag, seeds) for tag, _ in METHODS + ABLATIONS}
    base = results["base"].get(seeds[0]) if results["base"] else None
    summary: dict[str, Any] = {"name": config.name, "env": config.env, "model": config.model, "seeds": seeds,
                               "report": str(root / "report.md"), "methods": {}, "efficiency": {}, "ablation": {},
                               "bootstrap": {}, "accounting": {}}
    lines = [f"# pivotgym experiment `{config.name}`", "",
             f"Target domain `{config.env}`, base model `{config.model}`, seeds {seed_text}. Every number below "
             "comes from this run's files under this folder (`eval/*.json`, `train/*/curve.json`, `data/*`). "
             "Scores in %; with several seeds a cell shows the mean (min–max). PivotRL and E2E RL start from "
             + ("the base model, like SFT (the paper's comparison)." if getattr(config, "rl_init", "base") == "base"
                else "the SFT model (`rl_init: sft`, for a base model whose samples rarely pass the verifier, so "
                     "that profiling finds pivots and RL has a signal); their deltas therefore include SFT's."), ""]

    # ---- main table
    turns = dict(getattr(config, "curve", {}) or {}).get("metric") == "turns"
    episodes = any(_avg(r, "episodes") is not None for res in results.values() for r in res.values())
    rows = []
    for tag, label in METHODS:
        res = results[tag]
        if not res:
            continue
        ind, ind_v = _mean_over(res, lambda r: _avg(r, "in_domain"))
        ood, ood_v = _mean_over(res, lambda r: _avg(r, "ood"))
        d_ood = None if (ood is None or base is None or _avg(base, "ood") is None) else ood - _avg(base, "ood")
        d_ind = None if (ind is None or base is None or _avg(base, "in_domain") is None) else ind - _avg(base, "in_domain")
        used = "-" if tag == "base" else ", ".join(str(s) for s in res)
        row = [label, _cell(ind, ind_v), "-" if d_ind is None else f"{100 * d_ind:+.1f}"]
        if episodes:
            epi, epi_v = _mean_over(res, lambda r: _avg(r, "episodes"))
            row.append(_cell(epi, epi_v))
            summary.setdefault("episodes", {})[tag] = epi
        rows.append(row + [_cell(ood, ood_v), "-" if d_ood is None else f"{100 * d_ood:+.1f}", used])
        summary["methods"][tag] = {"in_domain": ind, "ood": ood, "delta_in_domain": d_ind, "delta_ood": d_ood,
                                   "seeds": list(res), "per_seed_in_domain": ind_v, "per_seed_ood": ood_v}
    in_domain_label = "in-domain turn accuracy" if turns else "in-domain"
    header = (["model", in_domain_label, "Δ vs base"] + (["episode success"] if episodes else [])
              + ["OOD avg", "Δ OOD vs base", "seeds"])
    lines += ["## Base / SFT / PivotRL / E2E RL", ""]
    if turns:
        lines += ["In-domain **turn accuracy**: on every expert state of the held-out test tasks (the turns of their "
                  "expert trajectories, never trained on), the share where the model's greedy action passes the "
                  "functional verifier, averaged per task and then over tasks. It is PivotRL's unit of training "
                  "measured on unseen states, so it can move before whole episodes do"
                  + ("; *episode success* is one greedy episode per test task, judged by the env." if episodes
                     else "."), ""]
    lines += [markdown_table(header, rows), ""]
    acc_rows, summary["accounting"] = _accounting(root, seeds)
    if acc_rows:
        lines += ["### What each method spent", "",
                  "Mean over seeds. Continued SFT trains the SFT model further so that its optimiser steps from the "
                  "base model equal PivotRL's; E2E RL samples only the tasks that have expert trajectories. Rollout "
                  "turns count every generated training turn (PivotRL: its profiling samples too); wall-clock "
                  "excludes evaluation and includes PivotRL's profiling.", "",
                  markdown_table(["method", "starts from", "data", "optimiser steps", "steps from base",
                                  "tokens trained from base", "rollout turns", "wall-clock s", "wall-clock s from base"],
                                 acc_rows), ""]
    if base:
        summary["differences"] = _differences(root, seeds, base.get("role", {}))

    # ---- per-env table
    if base:
        keys = list(base["scores"])
        header = ["env", "role", "metric", "n"] + [label for tag, label in METHODS if results[tag]]
        env_rows = []
        for key in keys:
            row = [key, base["role"].get(key, ""), base["scores"][key]["metric"], base["scores"][key]["n"]]
            for tag, _label in METHODS:
                if results[tag]:
                    m, v = _mean_over(results[tag], lambda r, k=key: r["scores"].get(k, {}).get("value"))
                    row.append(_cell(m, v))
            env_rows.append(row)
        lines += ["### Per environment", "", markdown_table(header, env_rows), "",
                  "95% confidence intervals per env and model are in `eval/*.json` (`ci95`).", ""]

    # ---- efficiency
    curves = {s: (_read(root / "train" / f"pivot-s{s}" / "curve.json") or [],
                  _read(root / "train" / f"e2e-s{s}" / "curve.json") or []) for s in seeds}
    named_turns: dict[str, Curve] = {}
    for s, (pc, ec) in curves.items():
        suffix = f" (seed {s})" if len(seeds) > 1 else ""
        named_turns[f"PivotRL{suffix}"] = pc
        named_turns[f"E2E RL{suffix}"] = ec
    if any(c for pair in curves.values() for c in pair):
        # one seed: E2E's final score as the target line; several: each seed has its own, so none is drawn
        target = curves[seeds[0]][1][-1]["score"] if len(seeds) == 1 and curves[seeds[0]][1] else None
        score = "turn accuracy" if turns else "in-domain score"
        plot_curves(named_turns, plots / "curve_turns.png", x="turns", xlabel="rollout turns (incl. profiling)",
                    ylabel=score, title=f"{config.env}: {score} vs rollout turns", target=target)
        plot_curves(named_turns, plots / "curve_seconds.png", x="seconds", xlabel="wall-clock seconds (excl. eval)",
                    ylabel=score, title=f"{config.env}: {score} vs wall-clock", target=target)
        lines += ["## Cost: PivotRL vs end-to-end RL", "",
                  (f"In-domain turn accuracy (greedy action from the held-out expert states of "
                     f"{_curve_task_count(curves)} test tasks)" if turns else
                     f"In-domain score (one greedy episode on each of {_curve_task_count(curves)} test tasks)")
                  + " after every training step. PivotRL's curve starts at the cost of profiling: every profiling sample "
                  "counts as a rollout turn and the profiling time is added to its wall-clock.", "",
                  "![score vs turns](plots/curve_turns.png) ![score vs wall-clock](plots/curve_seconds.png)", ""]
        paired = [s for s, (pc, ec) in curves.items() if pc and ec]
        for x, unit in (("turns", "rollout turns"), ("seconds", "wall-clock")):
            try:
                boot = bootstrap_cost_ratio([curves[s][0] for s in paired], [curves[s][1] for s in paired], x)
            except ValueError as exc:
                boot = {"verdict": NOT_MEASURABLE, "error": str(exc)}
            summary["bootstrap"][x] = boot
            lines.append(f"- **{unit}, E2E cost / PivotRL cost to reach E2E's final score**: "
                         + (interval_text(boot) if "ratio" in boot else f"{boot['verdict']} ({boot['error']})") + ".")
        lines += ["", "The interval resamples seeds, then curve tasks, with replacement (paired: the same draw for "
                  "both methods). A ratio > 1 means PivotRL got there cheaper; a claim counts as reproduced only "
                  "when the whole interval lies above 1x. Where E2E RL does not rise above its start, there is "
                  "nothing to reach and a resample counts as 1x. Per seed:", ""]
        for s, (pc, ec) in curves.items():
            by_turns, by_secs = reach_ratio(pc, ec, "turns"), reach_ratio(pc, ec, "seconds")
            summary["efficiency"][str(s)] = {"turns": by_turns, "seconds": by_secs,
                                             "pivot_final": pc[-1]["score"] if pc else None,
                                             "e2e_final": ec[-1]["score"] if ec else None,
                                             "pivot_turns": pc[-1]["turns"] if pc else None,
                                             "e2e_turns": ec[-1]["turns"] if ec else None}
            if by_turns.get("target") is not None and not by_turns.get("reference"):  # E2E's curve stayed flat
                lines += [f"- seed {s}: {ratio_text(by_turns, 'turns')}; final scores PivotRL "
                          f"{pct(pc[-1]['score'] if pc else None)}%, E2E RL {pct(ec[-1]['score'])}%."]
            else:
                lines += [f"- seed {s}: rollout turns — {ratio_text(by_turns, 'turns')}; "
                          f"wall-clock — {ratio_text(by_secs, 's')}."]
        lines.append("")

    # ---- uninformative turns
    selects = {s: sel for s in seeds if (sel := _read(root / "data" / f"select-functional-s{s}.json"))}
    if selects:
        k = config.profile.get("k", 8)
        per_seed = {s: sel["stats"]["per_env"].get("all", {}) for s, sel in selects.items()}
        kinds = {"all fail": "all_fail", "all pass": "all_pass", "informative": "informative", "pivots": "pivots"}
        shares = {label: sum(st.get(key, 0) / max(1, st.get("turns", 0)) for st in per_seed.values()) / len(per_seed)
                  for label, key in kinds.items()}
        share, share_v = _mean_over(per_seed, lambda st: st.get("share_uninformative"))
        plot_bars(shares, plots / "turn_shares.png", ylabel="share of expert turns", percent=True,
                  title=f"profiled turns (K={k}, mean of {len(per_seed)} seed(s))")
        rule = next(iter(selects.values()))["rule"]
        summary["uninformative"] = {"share": share, "per_seed": {str(s): st.get("share_uninformative")
                                                                 for s, st in per_seed.items()},
                                    "pivots": {str(s): st.get("pivots") for s, st in per_seed.items()}, "rule": rule}
        detail = "; ".join(f"seed {s}: {pct(st.get('share_uninformative'))}% of {st.get('turns', 0)} turns "
                           f"({st.get('all_fail', 0)} all fail, {st.get('all_pass', 0)} all pass), "
                           f"{st.get('pivots', 0)} pivots" for s, st in per_seed.items())
        lines += ["## Uninformative turns", "",
                  f"Expert turns profiled with K={k} samples from the frozen reference (the RL start model of each "
                  f"seed): **{pct(share)}%** carry no signal (every sample fails or every sample passes)"
                  + (f", {pct(min(share_v))}–{pct(max(share_v))}% across seeds" if len(share_v) > 1 else "")
                  + f". {detail}. Pivots pass the rule var > {rule.get('min_var', 0)} and mean < "
                  f"{rule.get('max_mean')}. The paper reports ~71% uninformative.", "",
                  "![turn shares](plots/turn_shares.png)", ""]

    # ---- ablation
    abl_rows, abl_vals, abl_err = [], {}, {}
    for tag, label in ABLATIONS:
        res = results[tag]
        if res:
            m, v = _mean_over(res, lambda r: _avg(r, "in_domain"))
            if m is not None:
                abl_vals[label] = m
                abl_err[label] = [min(v), max(v)]
                abl_rows.append([label, _cell(m, v), ", ".join(str(s) for s in res)])
                summary["ablation"][tag] = {"in_domain": m, "per_seed": v}
    if len(abl_vals) > 1:
        plot_bars(abl_vals, plots / "ablation.png", ylabel="in-domain score", percent=True,
                  title="ablation: which turns, which reward", errors=abl_err if len(seeds) > 1 else None)
        exact = {s: sel["pivots"] for s in seeds if (sel := _read(root / "data" / f"select-exact-s{s}.json"))}
        note = (" The exact-match profile selected " + ", ".join(f"{n} (seed {s})" for s, n in exact.items())
                + " pivots.") if exact else ""
        lines += ["## Ablation", "",
                  "Same trainer and budget; *random turns* trains on as many randomly chosen profiled turns as "
                  "there are pivots; *exact-match reward* profiles, selects and trains with the exact-match "
                  f"verifier instead of the functional one.{note}", "",
                  markdown_table(["variant", "in-domain", "seeds"], abl_rows), "", "![ablation](plots/ablation.png)", ""]

    # ---- claims
    lines += ["## The paper's claims at this scale", ""] + _claims(summary) + [""]
    timings = _read(root / "timings.json") or {}
    if timings:
        lines += ["## Run time", "", markdown_table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in timings.items()]),
                  f"\nTotal: {sum(timings.values()) / 60:.1f} min.", ""]
    cfg_path = getattr(config, "path", None)
    lines += ["## Reproduce", "", "```bash", f"pivotgym experiment {cfg_path or 'CONFIG.yaml'}", "```", ""]
    (root / "report.md").write_text("\n".join(lines), encoding="utf-8")
    (root / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    return summary


def _claims(summary: Mapping[str, Any]) -> list[str]:
    """Plain statements of which claims this run reproduces, computed from the summary."""
    m = summary["methods"]
    out = []
    for x, claim in (("turns", "Fewer rollout turns than E2E RL to E2E's final score"),
                     ("seconds", "Less wall-clock than E2E RL to E2E's final score")):
        boot = summary.get("bootstrap", {}).get(x)
        if boot:
            out.append(f"- **{claim}**: " + (interval_text(boot) if "ratio" in boot else boot["verdict"])
                       + (" (the interval includes 1x: these curves cannot tell the methods apart)"
                          if boot.get("verdict") == NOT_MEASURABLE else "") + ".")
    for ref, name in (("sft", "SFT"), ("sft-more", "continued SFT (matched optimiser steps)")):
        if "pivot" in m and ref in m and m["pivot"]["in_domain"] is not None and m[ref]["in_domain"] is not None:
            diff = summary.get("differences", {}).get(f"pivot-vs-{ref}-in_domain")
            detail = f"({pct(m['pivot']['in_domain'])} vs {pct(m[ref]['in_domain'])}"
            if diff:
                detail += (f"; difference {100 * diff['diff']:+.1f} points, 95% bootstrap "
                           f"[{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}] over {diff['items']} items x "
                           f"{diff['seeds']} seed(s)")
                verdict = diff["verdict"]
            else:
                verdict = NOT_MEASURABLE
            out.append(f"- **In-domain PivotRL > {name}**: {verdict} {detail}).")
    diffs = summary.get("differences", {})

    def interval(key: str) -> str:
        # the sign of each difference is stated, not a verdict: "SFT - base" supports the claim when it is
        # *below* 0, "PivotRL - SFT" when it is above
        d = diffs.get(key)
        side = ("" if not d else "above 0" if d["low"] > 0 else "below 0" if d["high"] < 0 else "includes 0")
        return ("" if not d else f" {100 * d['diff']:+.1f} points, 95% bootstrap [{100 * d['low']:+.1f}, "
                f"{100 * d['high']:+.1f}] over {d['items']} items x {d['seeds']} seed(s), {side}")

    if "pivot" in m and "sft" in m and m["pivot"]["delta_ood"] is not None and m["sft"]["delta_ood"] is not None:
        dp, ds = m["pivot"]["delta_ood"], m["sft"]["delta_ood"]
        regress, retain = diffs.get("sft-vs-base-ood", {}), diffs.get("pivot-vs-sft-ood", {})
        sft_regresses, sft_gains = regress.get("verdict") == CONTRADICTED, regress.get("verdict") == REPRODUCED
        if sft_regresses and retain.get("verdict") == REPRODUCED:
            verdict = REPRODUCED
        elif sft_gains:
            verdict = f"{CONTRADICTED} (SFT gains OOD here rather than regressing)"
        elif sft_regresses or retain.get("verdict") in (REPRODUCED, CONTRADICTED):
            verdict = "partly measurable"
        else:
            verdict = NOT_MEASURABLE
        out.append(f"- **OOD retained by PivotRL, SFT regresses**: {verdict}. SFT − base on OOD"
                   f"{interval('sft-vs-base-ood') or f' {100 * ds:+.1f} points'}; PivotRL − base on OOD"
                   f"{interval('pivot-vs-base-ood') or f' {100 * dp:+.1f} points'}; PivotRL − SFT on OOD"
                   f"{interval('pivot-vs-sft-ood') or ' -'}.")
    a = summary["ablation"]
    if "pivot" in a and "random-turns" in a:
        out.append(f"- **Pivots beat random turns** (point estimate, no interval): {'yes' if a['pivot']['in_domain'] > a['random-turns']['in_domain'] else 'no'} "
                   f"({pct(a['pivot']['in_domain'])} vs {pct(a['random-turns']['in_domain'])}).")
    if "pivot" in a and "exact-reward" in a:
        out.append(f"- **Functional reward beats exact match** (point estimate, no interval): "
                   f"{'yes' if a['pivot']['in_domain'] > a['exact-reward']['in_domain'] else 'no'} "
                   f"({pct(a['pivot']['in_domain'])} vs {pct(a['exact-reward']['in_domain'])}).")
    return out or ["- not enough stages finished to judge"]
