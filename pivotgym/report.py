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

COLORS = {"PivotRL": "#1f77b4", "E2E RL": "#d62728", "SFT": "#2ca02c", "base": "#7f7f7f"}


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


__all__ = ["markdown_table", "pct", "plot_bars", "plot_curves", "ratio_text", "reach_ratio", "time_to_reach"]


# ----------------------------------------------------------------------------------------- experiment report
METHODS = (("base", "base"), ("sft", "SFT"), ("pivot", "PivotRL"), ("e2e", "E2E RL"))
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
                               "report": str(root / "report.md"), "methods": {}, "efficiency": {}, "ablation": {}}
    lines = [f"# pivotgym experiment `{config.name}`", "",
             f"Target domain `{config.env}`, base model `{config.model}`, seeds {seed_text}. Every number below "
             "comes from this run's files under this folder (`eval/*.json`, `train/*/curve.json`, `data/*`). "
             "Scores in %; with several seeds a cell shows the mean (min–max). PivotRL and E2E RL start from "
             + ("the base model, like SFT (the paper's comparison)." if getattr(config, "rl_init", "base") == "base"
                else "the SFT model (`rl_init: sft`: the base model's samples never pass the verifier, so RL from "
                     "it has no signal); their deltas therefore include SFT's."), ""]

    # ---- main table
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
        rows.append([label, _cell(ind, ind_v), "-" if d_ind is None else f"{100 * d_ind:+.1f}", _cell(ood, ood_v),
                     "-" if d_ood is None else f"{100 * d_ood:+.1f}", used])
        summary["methods"][tag] = {"in_domain": ind, "ood": ood, "delta_in_domain": d_ind, "delta_ood": d_ood,
                                   "seeds": list(res), "per_seed_in_domain": ind_v, "per_seed_ood": ood_v}
    lines += ["## Base / SFT / PivotRL / E2E RL", "",
              markdown_table(["model", "in-domain", "Δ in-domain vs base", "OOD avg", "Δ OOD vs base", "seeds"], rows), ""]

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
        plot_curves(named_turns, plots / "curve_turns.png", x="turns", xlabel="rollout turns (incl. profiling)",
                    title=f"{config.env}: in-domain score vs rollout turns", target=target)
        plot_curves(named_turns, plots / "curve_seconds.png", x="seconds", xlabel="wall-clock seconds (excl. eval)",
                    title=f"{config.env}: in-domain score vs wall-clock", target=target)
        lines += ["## Cost: PivotRL vs end-to-end RL", "",
                  "In-domain score (greedy, the first test tasks) along training. PivotRL's curve starts at the "
                  "cost of profiling: every profiling sample counts as a rollout turn and the profiling time is "
                  "added to its wall-clock.", "",
                  "![score vs turns](plots/curve_turns.png) ![score vs wall-clock](plots/curve_seconds.png)", ""]
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


def _seed_verdict(ratios: Mapping[str, Mapping[str, Any]]) -> str:
    """"reproduced / mixed / not reproduced: k of n seeds (...)" over the seeds where the cost is measurable
    (E2E RL rose above its start score); PivotRL never reaching the target counts as not reproduced."""
    measurable = {seed: r for seed, r in ratios.items() if r.get("reference")}
    skipped = sorted(set(ratios) - set(measurable), key=str)
    note = f"; seed(s) {', '.join(skipped)} not measurable (E2E RL never rose above its start)" if skipped else ""
    if not measurable:
        return "not measurable in any seed (E2E RL never rose above its start score)"
    hits = [seed for seed, r in measurable.items() if r.get("ratio") and r["ratio"] > 1]
    verdict = ("reproduced" if len(hits) == len(measurable) else "not reproduced" if not hits else "mixed")
    each = ", ".join(f"seed {seed} {r['ratio']:.2f}x" if r.get("ratio") else f"seed {seed} never reached"
                     for seed, r in measurable.items())
    return f"{verdict}, {len(hits)} of {len(measurable)} measurable seed(s) ({each}){note}"


def _claims(summary: Mapping[str, Any]) -> list[str]:
    """Plain statements of which claims this run reproduces, computed from the summary."""
    m = summary["methods"]
    out = []
    for x, claim in (("turns", "Fewer rollout turns than E2E RL to E2E's final score"),
                     ("seconds", "Less wall-clock than E2E RL to E2E's final score")):
        ratios = {seed: v[x] for seed, v in summary["efficiency"].items() if v[x].get("target") is not None}
        if ratios:
            out.append(f"- **{claim}**: {_seed_verdict(ratios)}.")
    if "pivot" in m and "sft" in m and m["pivot"]["in_domain"] is not None and m["sft"]["in_domain"] is not None:
        ok = m["pivot"]["in_domain"] >= m["sft"]["in_domain"]
        out.append(f"- **In-domain PivotRL ≥ SFT**: {'reproduced' if ok else 'not reproduced'} "
                   f"({pct(m['pivot']['in_domain'])} vs {pct(m['sft']['in_domain'])}).")
    if "pivot" in m and "sft" in m and m["pivot"]["delta_ood"] is not None and m["sft"]["delta_ood"] is not None:
        dp, ds = m["pivot"]["delta_ood"], m["sft"]["delta_ood"]
        retained = dp >= ds
        out.append(f"- **OOD retained by PivotRL, SFT regresses**: PivotRL Δ OOD {100 * dp:+.1f}, SFT Δ OOD "
                   f"{100 * ds:+.1f} → {'reproduced' if retained and ds < 0 else 'partly' if retained else 'not reproduced'}"
                   f"{'' if ds < 0 else ' (SFT did not regress here)'}.")
    a = summary["ablation"]
    if "pivot" in a and "random-turns" in a:
        out.append(f"- **Pivots beat random turns**: {'yes' if a['pivot']['in_domain'] > a['random-turns']['in_domain'] else 'no'} "
                   f"({pct(a['pivot']['in_domain'])} vs {pct(a['random-turns']['in_domain'])}).")
    if "pivot" in a and "exact-reward" in a:
        out.append(f"- **Functional reward beats exact match**: "
                   f"{'yes' if a['pivot']['in_domain'] > a['exact-reward']['in_domain'] else 'no'} "
                   f"({pct(a['pivot']['in_domain'])} vs {pct(a['exact-reward']['in_domain'])}).")
    return out or ["- not enough stages finished to judge"]
