"""Choose each task's difficulty on the base model: ``python -m pivotgym_reasoning.calibrate``.

For every task of the catalog and every candidate level, the base model answers ``n`` calibration items
(their own seed, never a split's items) greedily in the env's chat format, through the project's sampler in
batches, and is scored exactly as the suite scores it (:func:`pivotgym.eval.scoring.generate_single`):
accuracy and parse rate. Beside them stands the level's chance floor (:func:`chance_floor`): the better of the
best constant answer (the commonest gold answer's share) and the copy-the-question answer
(:func:`~pivotgym_reasoning.tasks.echo_answer`) scored by the task's own scorer, over
:data:`~pivotgym_reasoning.tasks.CALIBRATION_SIZE` generated items (no model).

A level is usable when its accuracy is at least ``margin`` above its floor and at most ``ceiling``
(:func:`choose_level`): forgetting must be able to show as a drop that stays above chance, and a gain as a
rise below ceiling. The levels are tried easiest first and the first usable one is chosen - it leaves the
most room for a drop - so a task stops at its first usable level, and also at the first level whose
accuracy is below ``margin`` (a harder one scores no higher, so it cannot reach any floor plus ``margin``);
``--all-levels`` tries every level for the table. A task with no usable level is left out of the suite.
The choice is frozen by hand in :data:`~pivotgym_reasoning.tasks.TASKS` (``level``, ``in_suite``), with
the table in the plugin's README.

    nice -n 10 python -m pivotgym_reasoning.calibrate --model smollm2-135m --n 50 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pivotgym_reasoning.tasks import CALIBRATION_SIZE, SEEDS, TASKS, echo_answer

__all__ = ["CEILING", "MARGIN", "calibrate", "chance_floor", "choose_level", "format_table", "main", "usable"]

#: a usable level's accuracy is at least this far above its chance floor
MARGIN = 0.15
#: and at most this (room to rise)
CEILING = 0.85


def chance_floor(task: str, level: str, size: int = CALIBRATION_SIZE) -> dict[str, float]:
    """The chance floors of ``task`` at ``level`` over ``size`` generated items: ``constant`` (the share of
    the commonest gold answer: what always giving it scores), ``echo`` (what copying from the question scores
    under the task's scorer), and ``chance``, the larger."""
    from pivotgym_reasoning.env import ReasoningEnv, generate_entries

    env = ReasoningEnv(task, level=level)
    entries = generate_entries(env.reasoning_task, level, SEEDS["calibration"], size)
    golds = Counter(str(e["answer"]) for e in entries)
    constant = golds.most_common(1)[0][1] / len(entries)
    scorer = env.scorer()
    echo = 0.0
    for entry in entries:
        answer = echo_answer(task, entry)
        if answer is not None and float(scorer.score_answer(answer, entry)) >= 1.0:
            echo += 1
    echo /= len(entries)
    return {"constant": constant, "echo": echo, "chance": max(constant, echo)}


def usable(row: Mapping[str, Any], margin: float = MARGIN, ceiling: float = CEILING) -> bool:
    """Whether a calibration row's accuracy lies in the band ``[chance + margin, ceiling]``."""
    return bool(row["chance"] + margin <= row["accuracy"] <= ceiling)


def choose_level(rows: Sequence[Mapping[str, Any]], margin: float = MARGIN, ceiling: float = CEILING) -> str | None:
    """The level to freeze among one task's calibration ``rows`` (each with ``level``, ``accuracy`` and
    ``chance``; easiest first): the first whose accuracy lies in ``[chance + margin, ceiling]``, None when
    none does."""
    return next((str(r["level"]) for r in rows if usable(r, margin, ceiling)), None)


def calibrate(
    sampler: Any,
    tasks: Sequence[str] | None = None,
    n: int = 50,
    *,
    levels: Mapping[str, Sequence[str]] | None = None,
    all_levels: bool = False,
    margin: float = MARGIN,
    ceiling: float = CEILING,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """One row per (task, level) tried: ``task``, ``level``, ``n``, ``accuracy``, ``parse_rate``,
    ``constant``, ``echo``, ``chance``, ``max_new_tokens``, ``seconds`` and three sample ``replies``.
    ``levels`` restricts a task's candidate levels (default: all of them, easiest first); a task stops at its
    first usable level or at the first below the band unless ``all_levels`` (see the module docstring)."""
    from pivotgym import SamplingParams, generate_single
    from pivotgym_reasoning.env import ReasoningEnv, generate_entries

    out: list[dict[str, Any]] = []
    for task in tasks or list(TASKS):
        for level in (levels or {}).get(task) or list(TASKS[task].levels):
            started = time.perf_counter()
            env = ReasoningEnv(task, level=level)
            items = [
                env._task("calibration", e)
                for e in generate_entries(env.reasoning_task, level, SEEDS["calibration"], n)
            ]
            tokens = env.reasoning_task.levels[level].max_new_tokens
            params = SamplingParams(temperature=0.0, max_new_tokens=tokens, seed=0)
            results = generate_single(sampler, env, items, params)
            floor = chance_floor(task, level)
            row = {
                "task": task,
                "level": level,
                "n": len(items),
                "accuracy": sum(r["reward"] for r in results) / len(items),
                "parse_rate": sum(r["parsed"] for r in results) / len(items),
                **floor,
                "max_new_tokens": tokens,
                "seconds": round(time.perf_counter() - started, 1),
                "replies": [r["reply"][:80] for r in results[:3]],
            }
            out.append(row)
            # a harder level scores at most this one's accuracy: below ``margin`` it cannot reach any band
            stop = not all_levels and (usable(row, margin, ceiling) or row["accuracy"] < margin)
            if progress:
                print(
                    f"[calibrate] {task} {level}: acc {row['accuracy']:.2f} parse {row['parse_rate']:.2f} "
                    f"chance {row['chance']:.2f} ({row['seconds']} s)",
                    file=sys.stderr,
                    flush=True,
                )
            if stop:
                break
    return out


def format_table(rows: Sequence[Mapping[str, Any]], margin: float = MARGIN, ceiling: float = CEILING) -> str:
    """The calibration rows as a Markdown table, the chosen level of each task marked."""
    tasks = {r["task"] for r in rows}
    chosen = {task: choose_level([r for r in rows if r["task"] == task], margin, ceiling) for task in tasks}
    lines = [
        "| task | level | n | accuracy | parse rate | chance (constant / echo) | chosen |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "**yes**" if chosen.get(r["task"]) == r["level"] else ""
        lines.append(
            f"| {r['task']} | {r['level']} | {r['n']} | {r['accuracy']:.2f} | {r['parse_rate']:.2f} | "
            f"{r['chance']:.2f} ({r['constant']:.2f} / {r['echo']:.2f}) | {mark} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = "pivotgym reasoning calibrate") -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model alias, folder or hub id (default smollm2-135m)")
    parser.add_argument("--sampler", default="hf", help="registered sampler backend (default hf)")
    parser.add_argument("--n", type=int, default=50, help="calibration items per task and level (default 50)")
    parser.add_argument("--tasks", default="", help="comma-separated catalog names (default: all)")
    parser.add_argument("--batch-size", type=int, default=64, help="sequences decoded together (default 64)")
    parser.add_argument("--all-levels", action="store_true", help="try every level, not only up to the first usable")
    parser.add_argument("--margin", type=float, default=MARGIN, help="accuracy above chance a level needs")
    parser.add_argument("--ceiling", type=float, default=CEILING, help="highest accuracy a level may have")
    parser.add_argument(
        "--json", nargs="?", const="-", default=None, help="also write the rows as JSON (to FILE, or stdout)"
    )
    args = parser.parse_args(argv)
    from pivotgym import make_sampler

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] or list(TASKS)
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown task(s) {unknown}; the catalog has {sorted(TASKS)}")
    started = time.perf_counter()
    sampler = make_sampler(args.sampler, args.model, {}, max_batch_size=args.batch_size)
    rows = calibrate(sampler, tasks, args.n, all_levels=args.all_levels, margin=args.margin, ceiling=args.ceiling)
    chosen = {t: choose_level([r for r in rows if r["task"] == t], args.margin, args.ceiling) for t in tasks}
    print(format_table(rows, args.margin, args.ceiling))
    print(f"\nchosen: {json.dumps(chosen)}  ({time.perf_counter() - started:.0f} s)")
    if args.json is not None:
        text = json.dumps({"model": args.model, "n": args.n, "rows": rows, "chosen": chosen}, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
