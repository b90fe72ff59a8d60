"""Every path under a run folder and every stage name, in one place.

A run folder ``runs/<name>/`` holds::

    config.json               the config and the provenance of the run (code, libraries, threads, device)
    timings.json              seconds per stage run (pivot-s0), reset by --rerun
    stages/<stage>[-s<seed>].json   each stage's fingerprint record (see fingerprint.py)
    data/expert.jsonl         expert trajectories of the train split (SFT, PivotRL and E2E RL data)
    data/warmup-expert.jsonl  the warm-up model's own expert trajectories (``rl_init: warmup``)
    data/test-expert.jsonl    expert trajectories of the curve tasks (the held-out states of turn accuracy)
    data/profiles-<verifier>-s<seed>.jsonl (+ .meta.json), data/select-<verifier>-s<seed>.json,
    data/pivots-<functional|exact|random>-s<seed>.jsonl
    eval/<tag>[-s<seed>].json (+ .items.jsonl)   suite evaluations; eval/<tag>-curve-score.json curve starts
    eval/floors.json          the in-domain floors (random legal action, always expert, multi-credit share)
    train/<tag>-s<seed>/      trainer output, curve.json, accounting.json, experiment-summary.json
    models/sft-s<seed>/       the saved SFT model (RL start, continued SFT start)
    models/warmup-s<seed>/    the saved warm-up model (``rl_init: warmup``: every method's start)
    report.md, summary.json, plots/*.png

Stages and the methods they train share one spelling (``sft-more`` is the stage, the method tag, the folder
and the summary key of continued SFT). :func:`upstream` is the stage dependency graph: a stage's fingerprint
includes its upstream stages' fingerprints, and ``--rerun STAGE`` recomputes :func:`downstream` of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["METHOD_LABELS", "SEEDLESS", "STAGES", "RunLayout", "downstream", "rl_start_stage", "upstream"]

#: the stages in run order (``report`` always runs last and is never skipped)
STAGES = ("base", "expert", "warmup", "sft", "profile", "pivot", "e2e", "sft-more", "ablation", "report")
#: stages that run once, not once per seed
SEEDLESS = ("base", "expert", "report")
#: method tag -> the name the report shows (the evaluated models: ``eval/<tag>-s<seed>.json``)
METHOD_LABELS = {
    "base": "base",
    "warmup": "warm-up",
    "sft": "SFT",
    "sft-more": "continued SFT",
    "pivot": "PivotRL",
    "e2e": "E2E RL",
    "random-turns": "random turns",
    "exact-reward": "exact-match reward",
    "placebo": "placebo (shuffled advantages)",
    "e2e-progress": "E2E RL, progress reward",
    "e2e-expert-states": "E2E RL, from expert states",
}
#: ablation name (config ``ablations``) -> the method tag of its PivotRL run
ABLATION_TAGS = {
    "random_turns": "random-turns",
    "exact_reward": "exact-reward",
    "placebo": "placebo",
    "e2e_progress": "e2e-progress",
    "e2e_expert_states": "e2e-expert-states",
}


def upstream(stage: str, rl_init: str) -> tuple[str, ...]:
    """The stages whose results ``stage`` uses (the dependency graph). ``rl_init`` decides where RL starts:
    from the base model (measured by ``base``), from the SFT model (trained and measured by ``sft``) or from
    the warm-up model (trained and measured by ``warmup``, where SFT starts too)."""
    start = rl_start_stage(rl_init)
    graph: dict[str, tuple[str, ...]] = {
        "base": (),
        "expert": (),
        "warmup": ("expert",),
        "sft": ("expert", "warmup") if rl_init == "warmup" else ("expert",),
        "profile": ("expert",) if start == "base" else ("expert", start),
        "pivot": ("profile", start),
        "e2e": ("expert", start),
        "sft-more": ("sft", "pivot"),  # continued SFT matches PivotRL's optimiser steps
        "ablation": ("profile", "pivot", start),  # its variants are compared with PivotRL, same trainer config
        "report": tuple(s for s in STAGES if s != "report"),
    }
    return tuple(dict.fromkeys(graph[stage]))


def rl_start_stage(rl_init: str) -> str:
    """The stage that trains and measures the model PivotRL and E2E RL start from (``base``, ``sft`` or
    ``warmup``: the config's ``rl_init`` is that stage's name)."""
    return rl_init if rl_init in ("sft", "warmup") else "base"


def downstream(stages: Iterable[str], rl_init: str) -> list[str]:
    """``stages`` and every stage that depends on one of them, directly or not (in run order)."""
    chosen = set(stages)
    changed = True
    while changed:
        changed = False
        for stage in STAGES:
            if stage not in chosen and chosen & set(upstream(stage, rl_init)):
                chosen.add(stage)
                changed = True
    return [s for s in STAGES if s in chosen]


class RunLayout:
    """The paths of one run folder. Stages, the report and the resume check ask it for every path."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.evals = self.root / "eval"
        self.train = self.root / "train"
        self.models = self.root / "models"
        self.plots = self.root / "plots"
        self.stages = self.root / "stages"
        self.config = self.root / "config.json"
        self.timings = self.root / "timings.json"
        self.report = self.root / "report.md"
        self.summary = self.root / "summary.json"

    def make_dirs(self) -> None:
        for folder in (self.data, self.evals, self.train, self.plots, self.stages):
            folder.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ data
    @property
    def expert(self) -> Path:
        return self.data / "expert.jsonl"

    @property
    def warmup_expert(self) -> Path:
        """The warm-up model's expert trajectories (train split, after the training tasks)."""
        return self.data / "warmup-expert.jsonl"

    @property
    def held_out(self) -> Path:
        return self.data / "test-expert.jsonl"

    def profiles(self, verifier: str, seed: int) -> Path:
        """Turn profiles of ``verifier`` (``functional`` or ``exact``)."""
        return self.data / f"profiles-{verifier}-s{seed}.jsonl"

    def profiles_meta(self, verifier: str, seed: int) -> Path:
        return self.data / f"profiles-{verifier}-s{seed}.meta.json"

    def profiles_clock(self, verifier: str, seed: int) -> Path:
        """The profiling seconds of every attempt so far (a resumed profile counts the killed attempts too)."""
        return self.data / f"profiles-{verifier}-s{seed}.seconds.json"

    def selection(self, verifier: str, seed: int) -> Path:
        return self.data / f"select-{verifier}-s{seed}.json"

    def pivots(self, kind: str, seed: int) -> Path:
        """A pivot set: ``functional`` or ``exact`` (selected), ``random`` (as many random profiled turns)."""
        return self.data / f"pivots-{kind}-s{seed}.jsonl"

    # ------------------------------------------------------------------ evaluation
    def result(self, tag: str, seed: int | None = None) -> Path:
        """The suite evaluation of method ``tag`` (``base`` has one for every seed)."""
        return self.evals / ("base.json" if tag == "base" else f"{tag}-s{seed}.json")

    @staticmethod
    def items(result: Path) -> Path:
        """The item rows beside a suite evaluation."""
        return Path(str(result) + ".items.jsonl")

    @staticmethod
    def ood_part(result: Path) -> Path:
        """The evaluation of the members other than the in-domain one, merged into ``result``."""
        return result.with_name(result.stem + ".ood.json")

    def result_files(self, tag: str, seed: int | None = None) -> list[Path]:
        result = self.result(tag, seed)
        part = self.ood_part(result)
        return [result, self.items(result), part, self.items(part)]

    @property
    def floors(self) -> Path:
        """The in-domain floors: random-legal baseline, always-expert ceiling, multi-credit share."""
        return self.evals / "floors.json"

    def curve_start(self, tag: str, seed: int | None = None) -> Path:
        """The in-domain curve score of an RL start model (``base``, ``sft`` or ``warmup``)."""
        return self.evals / ("base-curve-score.json" if tag == "base" else f"{tag}-s{seed}-curve-score.json")

    # ------------------------------------------------------------------ training
    def train_dir(self, tag: str, seed: int) -> Path:
        return self.train / f"{tag}-s{seed}"

    def curve(self, tag: str, seed: int) -> Path:
        return self.train_dir(tag, seed) / "curve.json"

    def metrics(self, tag: str, seed: int) -> Path:
        """The trainer's per-step and evaluation rows (``metrics.jsonl``)."""
        return self.train_dir(tag, seed) / "metrics.jsonl"

    def accounting(self, tag: str, seed: int) -> Path:
        return self.train_dir(tag, seed) / "accounting.json"

    def trainer_summary(self, tag: str, seed: int) -> Path:
        return self.train_dir(tag, seed) / "experiment-summary.json"

    def task_ids(self, tag: str, seed: int) -> Path:
        return self.train_dir(tag, seed) / "task_ids.json"

    def checkpoints(self, tag: str, seed: int) -> Path:
        return self.train_dir(tag, seed) / "checkpoints"

    def model(self, tag: str, seed: int) -> Path:
        """A saved model (``models/sft-s<seed>``, ``models/warmup-s<seed>``)."""
        return self.models / f"{tag}-s{seed}"

    def model_saved(self, tag: str, seed: int) -> bool:
        """Whether :meth:`model` holds a saved model (its ``config.json``)."""
        return (self.model(tag, seed) / "config.json").exists()

    # ------------------------------------------------------------------ report
    def plot(self, name: str) -> Path:
        return self.plots / f"{name}.png"

    # ------------------------------------------------------------------ stage records
    def record(self, stage: str, seed: int | None = None) -> Path:
        """The fingerprint record of one stage run."""
        return self.stages / (f"{stage}.json" if seed is None else f"{stage}-s{seed}.json")

    def outputs(self, stage: str, seed: int | None = None) -> list[Path]:
        """Everything ``stage`` writes for ``seed`` (what ``--rerun`` deletes before running it again)."""
        if stage == "base":
            return [*self.result_files("base"), self.curve_start("base"), self.held_out, self.floors]
        if stage == "expert":
            return [self.expert, self.warmup_expert]
        if stage == "report":
            return [self.report, self.summary, self.plots]
        assert seed is not None, f"stage {stage} runs once per seed"
        if stage == "profile":
            return [
                self.profiles("functional", seed),
                self.profiles_meta("functional", seed),
                self.profiles_clock("functional", seed),
                self.selection("functional", seed),
                self.pivots("functional", seed),
                self.pivots("random", seed),
            ]
        if stage == "ablation":
            return [
                *(
                    p
                    for tag in ABLATION_TAGS.values()
                    for p in (self.train_dir(tag, seed), *self.result_files(tag, seed))
                ),
                self.profiles("exact", seed),
                self.profiles_meta("exact", seed),
                self.profiles_clock("exact", seed),
                self.selection("exact", seed),
                self.pivots("exact", seed),
            ]
        extra = [self.curve_start(stage, seed), self.model(stage, seed)] if stage in ("sft", "warmup") else []
        return [self.train_dir(stage, seed), *self.result_files(stage, seed), *extra]
