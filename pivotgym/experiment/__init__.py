"""``pivotgym experiment CONFIG``: the paper's comparison for one target domain, end to end.

Stages (each writes its outputs under ``runs/<name>/``, see :mod:`~pivotgym.experiment.layout`; a finished
stage is skipped when its fingerprint matches, so an interrupted run resumes where it stopped, and a rerun
under a changed config stops with :class:`~pivotgym.errors.StageChanged` until told ``--rerun STAGE``):

1. ``base``     - evaluate the base model on the suite (in-domain test split + OOD envs);
2. ``expert``   - expert trajectories on the domain's train split;
3. ``sft``      - the SFT baseline on them, then its suite evaluation;
4. ``profile``  - K samples per expert turn from the frozen RL start model, scored by the functional
   verifier; ``select`` keeps the pivots (reward variance > 0, mean < λ);
5. ``pivot``    - PivotRL on the pivots (an in-domain learning curve against rollout turns and wall-clock),
   then its suite evaluation;
6. ``e2e``      - end-to-end multi-turn RL from the same start model on exactly the tasks that have expert
   trajectories (the data SFT and PivotRL see), same curve, same evaluation;
7. ``sft-more`` - continued SFT, the matched SFT baseline: SFT continued from the SFT model for as many
   optimiser steps as the RL path spends, so "PivotRL beats SFT" cannot be extra training alone;
8. ``ablation`` - PivotRL on as many *random* profiled turns, and PivotRL with *exact-match* rewards (profiled
   and trained with the exact verifier): final in-domain score of each;
9. ``report``   - ``report.md`` with PNG plots beside it and ``summary.json``.

Training stages run once per seed in ``seeds``. The in-domain learning curves measure ``curve.metric`` on
the ``curve.tasks`` first test tasks after every ``curve.every`` steps (or at ``curve.points`` evenly spaced
steps of each run), keeping each task's score so the report can bootstrap over tasks and seeds; their
wall-clock excludes that evaluation, and PivotRL's includes the profiling time and its rollout turns include
every profiling sample (the honest cost of selecting pivots). Each training stage also writes
``accounting.json``: data, optimiser steps, trained tokens, rollout turns and wall-clock, the report's
side-by-side table.
"""

from __future__ import annotations

from pivotgym.experiment.accounting import matched_sft_steps, optimizer_steps, rl_total_steps, write_accounting
from pivotgym.experiment.config import (
    ABLATIONS,
    CURVE_METRICS,
    CurveSection,
    EvalSection,
    ExperimentConfig,
    ExperimentError,
    ProfileSection,
    check_ids,
    load_experiment,
)
from pivotgym.experiment.layout import STAGES, RunLayout, downstream, upstream
from pivotgym.experiment.pipeline import run_experiment
from pivotgym.experiment.report import write_experiment_report
from pivotgym.experiment.run import Run
from pivotgym.experiment.stages import expert_task_e2e

__all__ = [
    "ABLATIONS",
    "CURVE_METRICS",
    "STAGES",
    "CurveSection",
    "EvalSection",
    "ExperimentConfig",
    "ExperimentError",
    "ProfileSection",
    "Run",
    "RunLayout",
    "check_ids",
    "downstream",
    "expert_task_e2e",
    "load_experiment",
    "matched_sft_steps",
    "optimizer_steps",
    "rl_total_steps",
    "run_experiment",
    "upstream",
    "write_accounting",
    "write_experiment_report",
]
