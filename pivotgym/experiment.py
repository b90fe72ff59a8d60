"""``pivotgym experiment CONFIG``: the paper's comparison for one target domain, end to end.

Stages (each writes its outputs under ``runs/<name>/`` and is skipped when they already exist, so an
interrupted run resumes where it stopped):

1. ``base``     - evaluate the base model on the suite (in-domain test split + OOD envs);
2. ``expert``   - expert trajectories on the domain's train split;
3. ``sft``      - the SFT baseline on them, then its suite evaluation;
4. ``profile``  - K samples per expert turn from the frozen base model, scored by the functional verifier;
   ``select`` keeps the pivots (reward variance > 0, mean < λ);
5. ``pivot``    - PivotRL on the pivots (an in-domain learning curve against rollout turns and wall-clock),
   then its suite evaluation;
6. ``e2e``      - end-to-end multi-turn RL from the same base model, same curve, same evaluation;
7. ``ablation`` - PivotRL on as many *random* profiled turns, and PivotRL with *exact-match* rewards (profiled
   and trained with the exact verifier): final in-domain score of each;
8. ``report``   - ``report.md`` with PNG plots beside it and ``summary.json``.

Training stages run once per seed in ``seeds``. The in-domain learning curves use greedy episodes on the first
``curve.tasks`` test tasks; their wall-clock excludes that evaluation, and PivotRL's includes the profiling
time and its rollout turns include every profiling sample (the honest cost of selecting pivots).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pivotgym.jsonl import read_jsonl, read_profiles, read_trajectories, write_jsonl, write_pivot_set
from pivotgym.suite import write_json

STAGES = ("base", "expert", "sft", "profile", "pivot", "e2e", "ablation", "report")


class ExperimentError(ValueError):
    """A malformed experiment config; the message names the field."""


@dataclass
class ExperimentConfig:
    """An experiment YAML (see ``examples/configs/quickstart.yaml`` for every field with comments)."""

    name: str
    env: str
    model: str = "smollm2-135m"
    seeds: list[int] = field(default_factory=lambda: [0])
    train_tasks: int | None = 32
    #: OOD members of the suite (env ids or ENV@SPLIT); the in-domain member is ``<env>@test``
    ood: list[str] = field(default_factory=list)
    #: or: a registered suite name whose members are used instead of ``env@test`` + ``ood``
    suite: str | None = None
    eval: dict[str, Any] = field(default_factory=dict)
    curve: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    select: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    pivot: dict[str, Any] = field(default_factory=dict)
    e2e: dict[str, Any] = field(default_factory=dict)
    ablations: list[str] = field(default_factory=lambda: ["random_turns", "exact_reward"])
    executor: str = "process"
    keep_checkpoints: bool = False
    #: where PivotRL and E2E RL start (and what profiles the turns): ``base`` (the paper's comparison: every
    #: method from the same base model) or ``sft`` (from the SFT model: for a base model whose samples never
    #: pass the verifier, so that profiling finds pivots and RL has a signal)
    rl_init: str = "base"
    path: Path | None = None

    @property
    def members(self) -> dict[str, str]:
        if self.suite:
            from pivotgym.registry import get_registry

            return dict(get_registry().suite(self.suite).members)
        return {f"{self.env}@test": "in_domain", **{m: "ood" for m in self.ood}}

    @property
    def in_domain(self) -> list[str]:
        return [k for k, r in self.members.items() if r == "in_domain"]


def load_experiment(path: str | Path) -> ExperimentConfig:
    """Read and validate an experiment YAML."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"experiment config {path} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: expected a YAML mapping")
    known = set(ExperimentConfig.__dataclass_fields__) - {"path"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ExperimentError(f"{path}: unknown key(s) {unknown}; known keys are {sorted(known)}")
    for key in ("name", "env"):
        if not data.get(key):
            raise ExperimentError(f"{path}: `{key}` is required")
    seeds = data.get("seeds", [0])
    data["seeds"] = [int(s) for s in (seeds if isinstance(seeds, list) else [seeds])]
    if data.get("rl_init", "base") not in ("base", "sft"):
        raise ExperimentError(f"{path}: rl_init must be base or sft, got {data['rl_init']!r}")
    bad = sorted(set(data.get("ablations") or []) - {"random_turns", "exact_reward"})
    if bad:
        raise ExperimentError(f"{path}: unknown ablation(s) {bad}; choose from random_turns, exact_reward")
    return ExperimentConfig(**data, path=path)


# ----------------------------------------------------------------------------------------- helpers
class Run:
    """Paths and shared state of one experiment run."""

    def __init__(self, config: ExperimentConfig, root: Path) -> None:
        self.config = config
        self.root = root
        for sub in ("data", "eval", "train", "plots"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._base_sampler: Any = None
        self._curve_tasks: list[Any] | None = None

    def base_sampler(self) -> Any:
        from pivotgym.sampling.hf import HFSampler

        if self._base_sampler is None:
            self._base_sampler = HFSampler(self.config.model, max_batch_size=32)
        return self._base_sampler

    def rl_model(self, seed: int) -> str:
        """The model PivotRL and E2E RL start from (and that profiles the turns) for ``seed``."""
        return self.config.model if self.config.rl_init == "base" else str(self.root / "models" / f"sft-s{seed}")

    def rl_start_score(self, seed: int) -> float:
        """In-domain curve score of :meth:`rl_model` (the learning curves' first point)."""
        name = "base-curve-score.json" if self.config.rl_init == "base" else f"sft-s{seed}-curve-score.json"
        return float(json.loads((self.root / "eval" / name).read_text())["score"])

    def curve_tasks(self) -> list[Any]:
        from pivotgym.registry import make

        if self._curve_tasks is None:
            env = make(self.config.env)
            self._curve_tasks = list(env.tasks("test"))[: int(self.config.curve.get("tasks", 16))]
        return self._curve_tasks

    def in_domain_score(self, sampler: Any) -> float:
        """Mean outcome reward of greedy episodes on the curve tasks (the learning curves' y axis)."""
        from pivotgym.registry import make
        from pivotgym.sampling.base import SamplingParams
        from pivotgym.suite import run_episodes

        params = SamplingParams(temperature=0.0, max_new_tokens=int(self.config.eval.get("max_new_tokens", 128)))
        kwargs = {"max_turns": int(self.config.curve["max_turns"])} if self.config.curve.get("max_turns") else {}
        rows = run_episodes(sampler, lambda: make(self.config.env, **kwargs), self.curve_tasks(), params,
                            batch_size=int(self.config.eval.get("batch_size", 8)))
        return sum(min(1.0, r["reward"]) for r in rows) / max(1, len(rows))

    def evaluate(self, sampler: Any, out: Path, members: Sequence[str] | None = None) -> dict[str, Any]:
        from pivotgym.suite import evaluate_suite

        ev = self.config.eval
        return evaluate_suite(self.config.members, sampler, out, limit=ev.get("limit"), members=members,
                              max_new_tokens=ev.get("max_new_tokens"), batch_size=int(ev.get("batch_size", 8)),
                              model=out.stem, progress=True, name=self.config.suite or self.config.name)


def _done(*paths: Path) -> bool:
    return all(p.exists() for p in paths)


def _trainer_kwargs(run: Run, section: dict[str, Any], seed: int, out: Path, model: str | None = None
                    ) -> dict[str, Any]:
    return {"model": model or run.config.model, "seed": seed, "output_dir": str(out), "report_to": ["jsonl"],
            "resume": "never", **section}


def _fit_with_curve(run: Run, trainer: Any, every: int, start: dict[str, float],
                    extra_seconds: float = 0.0) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Train, scoring the in-domain curve tasks every ``every`` steps and after the last one.

    x values: ``turns`` = the trainer's ``total_turns`` (rollout + filtered + profiling turns); ``seconds`` =
    its wall-clock minus evaluation time, plus ``extra_seconds`` (the profiling time, for PivotRL).
    """
    curve = [{"step": 0, **start}]

    def record(tr: Any, row: dict[str, Any]) -> None:
        if row["step"] % max(1, every) == 0 or row["step"] >= tr.config.steps:
            with tr.counters.time("eval"):
                score = run.in_domain_score(tr.sampler)
            seconds = row["wall_seconds"] - row.get("seconds_eval", 0.0) + extra_seconds
            curve.append({"step": row["step"], "turns": float(row["total_turns"]), "seconds": seconds, "score": score})

    summary = trainer.fit(callbacks=[record])
    return summary, curve


def _cleanup(run: Run, out: Path) -> None:
    if not run.config.keep_checkpoints:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)


# ----------------------------------------------------------------------------------------- stages
def stage_base(run: Run) -> None:
    out = run.root / "eval" / "base.json"
    if not _done(out):
        run.evaluate(run.base_sampler(), out)
    curve0 = run.root / "eval" / "base-curve-score.json"
    if not _done(curve0):
        write_json(curve0, {"score": run.in_domain_score(run.base_sampler()), "tasks": len(run.curve_tasks())})


def stage_expert(run: Run) -> None:
    from pivotgym.registry import make

    out = run.root / "data" / "expert.jsonl"
    if _done(out):
        return
    env = make(run.config.env)
    trajs = [t for t in env.expert_trajectories("train", limit=run.config.train_tasks) if t.reward > 0]
    if not trajs:
        raise ExperimentError(f"{run.config.env}: no successful expert trajectory on the train split")
    write_jsonl(out, trajs)


def stage_sft(run: Run, seed: int) -> None:
    from pivotgym.train import SFTConfig, SFTTrainer

    out_dir = run.root / "train" / f"sft-s{seed}"
    result = run.root / "eval" / f"sft-s{seed}.json"
    if _done(result):
        return
    cfg = SFTConfig.from_dict({**_trainer_kwargs(run, run.config.sft, seed, out_dir),
                               "trajectories": str(run.root / "data" / "expert.jsonl")})
    trainer = SFTTrainer(cfg)
    summary = trainer.fit()
    write_json(out_dir / "experiment-summary.json", summary)
    if run.config.rl_init == "sft":
        model_dir = Path(run.rl_model(seed))
        trainer.unwrapped_model.save_pretrained(model_dir)
        trainer.tokenizer.save_pretrained(model_dir)
        write_json(run.root / "eval" / f"sft-s{seed}-curve-score.json",
                   {"score": run.in_domain_score(trainer.sampler), "tasks": len(run.curve_tasks())})
    run.evaluate(trainer.sampler, result)
    _cleanup(run, out_dir)


def stage_profile(run: Run, seed: int, verifier: str = "functional") -> None:
    """Profile every expert turn with the frozen RL start model, then select pivots (and random turns)."""
    from pivotgym.pivot.profile import profile_trajectories
    from pivotgym.pivot.select import SelectionRule, select_pivots
    from pivotgym.sampling.base import SamplingParams

    data = run.root / "data"
    profiles_path = data / f"profiles-{verifier}-s{seed}.jsonl"
    meta_path = data / f"profiles-{verifier}-s{seed}.meta.json"
    if not _done(meta_path):
        p = dict(run.config.profile)
        params = SamplingParams(temperature=float(p.pop("temperature", 1.0)),
                                max_new_tokens=int(p.pop("max_new_tokens", 128)), top_p=float(p.pop("top_p", 1.0)))
        started = time.perf_counter()
        if run.config.rl_init == "base":
            sampler = run.base_sampler()
        else:
            from pivotgym.sampling.hf import HFSampler

            sampler = HFSampler(run.rl_model(seed), max_batch_size=32)
        p.setdefault("seed", seed)
        result = profile_trajectories(read_trajectories(data / "expert.jsonl"), sampler,
                                      out=profiles_path, executor=run.config.executor, params=params,
                                      verifier=verifier, **p)
        write_json(meta_path, {"seconds": time.perf_counter() - started, "stats": result.stats,
                               "turns": sum(pr.k for pr in result.profiles)})
    pivots_path = data / f"pivots-{verifier}-s{seed}.jsonl"
    if not _done(pivots_path, data / f"select-{verifier}-s{seed}.json"):
        profiles = read_profiles(profiles_path)
        rule = SelectionRule.from_dict(run.config.select)
        pivot_set = select_pivots(profiles, rule)
        write_pivot_set(pivots_path, pivot_set)
        write_json(data / f"select-{verifier}-s{seed}.json", {"rule": pivot_set.rule, "stats": pivot_set.stats,
                                                      "pivots": len(pivot_set.pivots)})
        if verifier == "functional":
            from pivotgym.types import PivotSet

            rng = random.Random(seed)
            chosen = rng.sample(profiles, min(len(profiles), max(1, len(pivot_set.pivots))))
            write_pivot_set(data / f"pivots-random-s{seed}.jsonl",
                            PivotSet(rule={"random_turns": len(chosen), "seed": seed}, pivots=chosen))


def _pivot_run(run: Run, seed: int, tag: str, pivots: Path, verifier: str, full_eval: bool) -> None:
    from pivotgym.train import PivotConfig, PivotTrainer

    out_dir = run.root / "train" / f"{tag}-s{seed}"
    result = run.root / "eval" / f"{tag}-s{seed}.json"
    if _done(result, out_dir / "curve.json"):
        return
    if not read_jsonl(pivots):
        write_json(out_dir / "curve.json", [])
        write_json(result, {"suite": "inline", "model": tag, "scores": {}, "role": {}, "skipped": "no pivots"})
        return
    vfy = "functional" if verifier == "functional" else "exact"
    meta = json.loads((run.root / "data" / f"profiles-{vfy}-s{seed}.meta.json").read_text())
    cfg = PivotConfig.from_dict({**_trainer_kwargs(run, run.config.pivot, seed, out_dir, run.rl_model(seed)),
                                 "pivots": str(pivots), "trajectories": str(run.root / "data" / "expert.jsonl"),
                                 "profiles": str(run.root / "data" / f"profiles-{vfy}-s{seed}.jsonl"),
                                 "verifier": verifier})
    trainer = PivotTrainer(cfg)
    start = run.rl_start_score(seed)
    if full_eval:
        summary, curve = _fit_with_curve(run, trainer, int(run.config.curve.get("every", 2)),
                                         {"turns": float(meta["turns"]), "seconds": float(meta["seconds"]),
                                          "score": start}, extra_seconds=float(meta["seconds"]))
    else:  # ablations: only the final in-domain score is reported, so no curve evaluations
        summary, curve = trainer.fit(), []
    write_json(out_dir / "experiment-summary.json", summary)
    write_json(out_dir / "curve.json", curve)
    run.evaluate(trainer.sampler, result, members=None if full_eval else run.config.in_domain)
    _cleanup(run, out_dir)


def stage_pivot(run: Run, seed: int) -> None:
    _pivot_run(run, seed, "pivot", run.root / "data" / f"pivots-functional-s{seed}.jsonl", "functional", True)


def stage_e2e(run: Run, seed: int) -> None:
    from pivotgym.train import E2EConfig, E2ETrainer

    out_dir = run.root / "train" / f"e2e-s{seed}"
    result = run.root / "eval" / f"e2e-s{seed}.json"
    if _done(result, out_dir / "curve.json"):
        return
    cfg = E2EConfig.from_dict({**_trainer_kwargs(run, run.config.e2e, seed, out_dir, run.rl_model(seed)),
                               "env_id": run.config.env})
    trainer = E2ETrainer(cfg)
    start = run.rl_start_score(seed)
    summary, curve = _fit_with_curve(run, trainer, int(run.config.curve.get("every", 2)),
                                     {"turns": 0.0, "seconds": 0.0, "score": start})
    write_json(out_dir / "experiment-summary.json", summary)
    write_json(out_dir / "curve.json", curve)
    run.evaluate(trainer.sampler, result)
    _cleanup(run, out_dir)


def stage_ablation(run: Run, seed: int) -> None:
    if "random_turns" in run.config.ablations:
        _pivot_run(run, seed, "random-turns", run.root / "data" / f"pivots-random-s{seed}.jsonl", "functional", False)
    if "exact_reward" in run.config.ablations:
        stage_profile(run, seed, verifier="exact")
        _pivot_run(run, seed, "exact-reward", run.root / "data" / f"pivots-exact-s{seed}.jsonl", "exact", False)


# ----------------------------------------------------------------------------------------- run
def run_experiment(config: ExperimentConfig, out_dir: str | Path | None = None,
                   stages: Sequence[str] | None = None) -> dict[str, Any]:
    """Run (or resume) every stage and write the report; returns the summary (also ``summary.json``)."""
    from pivotgym.report import write_experiment_report

    stages = list(stages or STAGES)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ExperimentError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
    root = Path(out_dir) if out_dir else Path("runs") / config.name
    run = Run(config, root)
    write_json(root / "config.json", {k: (str(v) if isinstance(v, Path) else v)
                                      for k, v in config.__dict__.items()})
    timings: dict[str, float] = json.loads((root / "timings.json").read_text()) if (root / "timings.json").exists() else {}
    plan: list[tuple[str, Callable[[], None]]] = [("base", lambda: stage_base(run)),
                                                  ("expert", lambda: stage_expert(run))]
    for seed in config.seeds:
        plan.append(("sft", lambda s=seed: stage_sft(run, s)))
    for seed in config.seeds:
        plan.append(("profile", lambda s=seed: stage_profile(run, s)))
        plan.append(("pivot", lambda s=seed: stage_pivot(run, s)))
        plan.append(("e2e", lambda s=seed: stage_e2e(run, s)))
    for seed in config.seeds:
        plan.append(("ablation", lambda s=seed: stage_ablation(run, s)))
    for name, fn in plan:
        if name not in stages:
            continue
        started = time.perf_counter()
        print(f"[experiment] stage {name}", flush=True)
        fn()
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started
        write_json(root / "timings.json", timings)
    summary: dict[str, Any] = {"name": config.name, "root": str(root)}
    if "report" in stages:
        summary = write_experiment_report(run.root, config)
    return summary


__all__ = ["ExperimentConfig", "ExperimentError", "Run", "STAGES", "load_experiment", "run_experiment"]
