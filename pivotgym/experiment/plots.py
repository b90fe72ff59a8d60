"""PNG plots of an experiment (matplotlib, Agg backend: no display needed): learning curves against rollout
turns or wall-clock with a dashed target line, and bar charts with error bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COLORS", "Curve", "plot_bars", "plot_curves"]

#: a learning curve: points with "turns", "seconds", "score" (and, for the bootstrap, "per_task" scores)
Curve = Sequence[Mapping[str, Any]]

COLORS = {"PivotRL": "#1f77b4", "E2E RL": "#d62728", "SFT": "#2ca02c", "continued SFT": "#98df8a", "base": "#7f7f7f"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_curves(
    curves: Mapping[str, Curve],
    path: str | Path,
    *,
    x: str = "turns",
    xlabel: str = "rollout turns",
    ylabel: str = "in-domain score",
    title: str = "",
    target: float | None = None,
) -> Path:
    """Line plot of several learning curves against ``x``; ``target`` draws a dashed horizontal line.

    A curve named ``"METHOD (seed N)"`` takes its method's colour and its seed's line style and marker, so the
    seeds of one method stay apart."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    lines, markers = ("-", "--", ":", "-."), ("o", "s", "^", "D", "v", "P", "X", "*")  # 8 seeds stay apart
    variants: dict[str, int] = {}
    for name, curve in curves.items():
        if curve:
            method, _, variant = name.partition(" (")
            i = variants.setdefault(variant, len(variants))
            line, marker = lines[i % len(lines)], markers[i % len(markers)]
            ax.plot(
                [p[x] for p in curve],
                [p["score"] for p in curve],
                marker=marker,
                linestyle=line,
                label=name,
                color=COLORS.get(method),
            )
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


def plot_bars(
    values: Mapping[str, float],
    path: str | Path,
    *,
    ylabel: str = "",
    title: str = "",
    errors: Mapping[str, Sequence[float]] | None = None,
    percent: bool = False,
) -> Path:
    """Bar chart of named values; ``errors`` maps a name to a ``[low, high]`` interval drawn as an error bar."""
    plt = _pyplot()
    names = list(values)
    heights = [float(values[n]) for n in names]
    fig, ax = plt.subplots(figsize=(max(4, 1.3 * len(names) + 2), 4), dpi=110)
    yerr = None
    if errors:
        yerr = [
            [max(0.0, h - errors.get(n, (h, h))[0]) for n, h in zip(names, heights)],
            [max(0.0, errors.get(n, (h, h))[1] - h) for n, h in zip(names, heights)],
        ]
    bars = ax.bar(names, heights, yerr=yerr, capsize=4, color=[COLORS.get(n, "#9467bd") for n in names])
    for bar, h in zip(bars, heights):
        ax.annotate(
            f"{100 * h:.0f}%" if percent else f"{h:.2f}",
            (bar.get_x() + bar.get_width() / 2, h),
            ha="center",
            va="bottom",
            fontsize=8,
        )
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
