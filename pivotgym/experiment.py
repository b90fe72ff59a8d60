"""``pivotgym experiment CONFIG``: the paper's comparison for one target domain, end to end.

Stages (each writes its outputs under ``runs/<name>/`` and is skipped when they already exist, so an
interrupted run resumes where it stopped):

1. ``base``     - evaluate the base model on the suite (in-domain test split + OOD envs);
2. ``expert``   - expert trajectories on the domain's train split;
3. ``sft``      - the SFT baseline on them, then its suite evaluation;
4. ``profile``  - K samples per expert turn from the frozen RL start model, scored by the functional
   verifier; ``select`` keeps the pivots (reward variance > 0, mean < λ);
5. ``pivot``    - PivotRL on the pivots (an in-domain learning curve against rollout turns and wall-clock),
   then its suite evaluation;
6. ``e2e``      - end-to-end multi-turn RL from the same start model on exactly the tasks that have expert
   trajectories (the data SFT and PivotRL see), same curve, same evaluation;
7. ``sft_more`` - the matched SFT baseline: SFT continued from the SFT model for as many optimiser steps as
   the RL path spends, so "PivotRL beats SFT" cannot be extra training alone;
8. ``ablation`` - PivotRL on as many *random* profiled turns, and PivotRL with *exact-match* rewards (profiled
   and trained with the exact verifier): final in-domain score of each;
9. ``report``   - ``report.md`` with PNG plots beside it and ``summary.json``.

Training stages run once per seed in ``seeds``. The in-domain learning curves use greedy episodes on the
``curve.tasks`` first test tasks (default: the whole test split) after every ``curve.every`` steps (default:
every step), keeping each task's score so the report can bootstrap over tasks and seeds; their wall-clock
excludes that evaluation, and PivotRL's includes the profiling time and its rollout turns include every
profiling sample (the honest cost of selecting pivots). Each training stage also writes ``accounting.json``:
data, optimiser steps, trained tokens, rollout turns and wall-clock, the report's side-by-side table.
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

#: the in-domain learning curves' y axis (``curve.metric``): ``episodes`` = success of one greedy episode per
#: test task; ``turns`` = turn accuracy, the share of held-out expert states (every turn of the expert
#: trajectories of the test tasks) where the greedy action passes the functional verifier, per task
CURVE_METRICS = ("episodes", "turns")
STAGES = ("base", "expert", "sft", "profile", "pivot", "e2e", "sft_more", "ablation", "report")


class ExperimentError(ValueError):
    """A malformed experiment config; the message names the field."""


@dataclass
class ExperimentConfig:
    """An experiment YAML (see ``examples/configs/quickstart.yaml`` for every field with comments)."""

    #: the run's name: stages write under `runs/<name>/` (unless another output folder is given)
    name: str
    #: the target env (e.g. `planning/blocks-v0`); its test split is the in-domain member
    env: str
    #: the base model: a bundled alias, a local folder or a cached hub id
    model: str = "smollm2-135m"
    #: training seeds (a single number means one seed); each trains every method once
    seeds: list[int] = field(default_factory=lambda: [0])
    #: expert trajectories taken from the train split, the data of SFT, PivotRL and E2E RL (null: all)
    train_tasks: int | None = 32
    #: OOD members of the suite (env ids or ENV@SPLIT); the in-domain member is `<env>@test`
    ood: list[str] = field(default_factory=list)
    #: or: a registered suite name whose members are used instead of `<env>@test` + `ood`
    suite: str | None = None
    #: suite evaluation options: `limit` (items per member), `max_new_tokens` (a suite-wide cap; an env's own
    #: limit is never lengthened), `batch_size`, `episodes` (with `curve.metric: turns`, also run the greedy
    #: episodes and report their success beside turn accuracy; default true)
    eval: dict[str, Any] = field(default_factory=dict)
    #: in-domain learning curves: `metric` (`episodes`: success of one greedy episode per test task;
    #: `turns`: turn accuracy on the held-out expert states of the test tasks), `every` (a point every N
    #: training steps; default 1), `tasks` (the first N test tasks; default all), `max_turns` (turn cap of
    #: the greedy episodes)
    curve: dict[str, Any] = field(default_factory=dict)
    #: profiler options (`k`, `temperature`, `max_new_tokens`, ...)
    profile: dict[str, Any] = field(default_factory=dict)
    #: pivot selection rule (`max_mean`, `min_var`)
    select: dict[str, Any] = field(default_factory=dict)
    #: `SFTConfig` fields for the SFT stage
    sft: dict[str, Any] = field(default_factory=dict)
    #: `PivotConfig` fields for the PivotRL stage
    pivot: dict[str, Any] = field(default_factory=dict)
    #: `E2EConfig` fields for the end-to-end RL stage
    e2e: dict[str, Any] = field(default_factory=dict)
    #: extra PivotRL runs: `random_turns` (as many random profiled turns instead of the pivots),
    #: `exact_reward` (profiled and trained with the exact-match verifier)
    ablations: list[str] = field(default_factory=lambda: ["random_turns", "exact_reward"])
    #: the matched SFT baseline (stage `sft_more`: SFT continued for PivotRL's extra optimiser steps); false
    #: skips it
    matched_sft: bool = True
    #: where profiling and verification fan out: `process` (local pool) or `ray`
    executor: str = "process"
    #: keep each training stage's `checkpoints/` when it finishes (false: deleted once the stage is done)
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
    if "seeds" in data and not isinstance(data["seeds"], list):
        data["seeds"] = [data["seeds"]]  # `seeds: 3` means [3]
    check_experiment_types(data, path)
    metric = (data.get("curve") or {}).get("metric", "episodes")
    if metric not in CURVE_METRICS:
        raise ExperimentError(f"{path}: curve.metric must be one of {', '.join(CURVE_METRICS)}, got {metric!r}")
    if data.get("rl_init", "base") not in ("base", "sft"):
        raise ExperimentError(f"{path}: rl_init must be base or sft, got {data['rl_init']!r}")
    bad = sorted(set(data.get("ablations") or []) - {"random_turns", "exact_reward"})
    if bad:
        raise ExperimentError(f"{path}: unknown ablation(s) {bad}; choose from random_turns, exact_reward")
    return ExperimentConfig(**data, path=path)


def check_experiment_types(data: dict[str, Any], path: str | Path | None = None) -> None:
    """Check an experiment mapping's values, and those of its ``sft``, ``pivot`` and ``e2e`` trainer sections,
    against the annotated field types before anything is built from them; raises ``ExperimentError``
    ``FILE: SECTION.FIELD: expected ..`` (so ``seeds: [many]`` never reaches ``int()``)."""
    from pivotgym.train.config import E2EConfig, PivotConfig, SFTConfig
    from pivotgym.types import RecordError, check_fields

    where = f"{path}: " if path else ""
    try:
        check_fields(ExperimentConfig, {k: v for k, v in data.items() if k != "path"}, required=False)
    except RecordError as exc:
        raise ExperimentError(f"{where}{exc}") from None
    for section, config_class in (("sft", SFTConfig), ("pivot", PivotConfig), ("e2e", E2EConfig)):
        try:
            check_fields(config_class, data.get(section) or {}, required=False)
        except RecordError as exc:
            raise ExperimentError(f"{where}{section}.{exc}") from None


def check_ids(config: ExperimentConfig) -> None:
    """Raise :class:`ExperimentError` naming the file and field when the config names an env or suite that is
    not installed; run before anything is written, so a typo leaves no empty run folder behind."""
    from pivotgym.registry import RegistryError, get_registry
    from pivotgym.suite import Member

    registry = get_registry()
    where = f"{config.path}: " if config.path else ""
    checks: list[tuple[str, Callable[[], Any]]] = [("env", lambda: registry.env_spec(config.env))]
    if config.suite:
        checks.append(("suite", lambda: registry.suite(config.suite or "")))
    checks += [(f"ood[{i}]", lambda m=m: registry.env_spec(Member.parse(m, "ood").env_id))
               for i, m in enumerate(config.ood)]
    for field_name, check in checks:
        try:
            check()
        except RegistryError as exc:
            raise ExperimentError(f"{where}{field_name}: {exc}") from None
    if config.suite:
        for key in config.members:
            try:
                registry.env_spec(Member.parse(key, "ood").env_id)
            except RegistryError as exc:
                raise ExperimentError(f"{where}suite {config.suite!r} member {key!r}: {exc}") from None


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
        self._held_out: list[Any] | None = None
        self._executor: Any = None
        self._greedy: Any = None

    @property
    def curve_metric(self) -> str:
        """``episodes`` or ``turns`` (see :data:`CURVE_METRICS`)."""
        return str(self.config.curve.get("metric", "episodes"))

    def executor(self) -> Any:
        """One verification executor for every turn-accuracy evaluation of the run (workers stay warm and
        keep their per-process verifier caches)."""
        from pivotgym.execution import make_executor

        if self._executor is None:
            self._executor = make_executor(self.config.executor, timeout=60.0)
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

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
        return float(self.rl_start_point(seed)["score"])

    def curve_tasks(self) -> list[Any]:
        """The first ``curve.tasks`` test tasks (all of them when unset or ``all``)."""
        from pivotgym.registry import make

        if self._curve_tasks is None:
            env = make(self.config.env)
            cap = self.config.curve.get("tasks")
            tasks = list(env.tasks("test"))
            self._curve_tasks = tasks if cap in (None, "all") else tasks[: int(cap)]
        return self._curve_tasks

    def held_out_trajectories(self) -> list[Any]:
        """Expert trajectories of the curve tasks (test split), written once to ``data/test-expert.jsonl``:
        the states of the turn-accuracy metric. Never trained on: SFT, PivotRL and E2E RL see the train split."""
        from pivotgym.registry import make

        if self._held_out is None:
            path = self.root / "data" / "test-expert.jsonl"
            if not path.exists():
                wanted = {t.id for t in self.curve_tasks()}
                trajs = [t for t in make(self.config.env).expert_trajectories("test")
                         if t.task_id in wanted and t.reward > 0]
                if not trajs:
                    raise ExperimentError(f"{self.config.env}: no successful expert trajectory on the test split, "
                                          "so turn accuracy has no states; use curve.metric: episodes")
                write_jsonl(path, trajs)
            self._held_out = read_trajectories(path)
        return self._held_out

    def greedy_params(self) -> Any:
        """Greedy decoding for the in-domain measurements, capped like the suite caps a member: the env's own
        ``max_new_tokens``, which ``eval.max_new_tokens`` can only shorten (:func:`pivotgym.suite.generation_cap`)."""
        from pivotgym.registry import make
        from pivotgym.sampling.base import SamplingParams
        from pivotgym.suite import generation_cap

        if self._greedy is None:
            cap = generation_cap(make(self.config.env), self.config.eval.get("max_new_tokens"))
            self._greedy = SamplingParams(temperature=0.0, max_new_tokens=cap)
        return self._greedy

    def turn_accuracy_per_task(self, sampler: Any) -> tuple[list[float], dict[str, int]]:
        """Per test task (in :meth:`held_out_trajectories` order): the share of its expert states where the
        greedy action passes the functional verifier. A failed verification (timeout, crash) is left out of
        its task's share and counted, as in profiling; a task whose every verification failed scores 0.

        This is PivotRL's own unit (one action from an expert state) measured on states no method trained on,
        so it moves before whole-episode success does; episode success stays in the evaluation table."""
        from pivotgym.pivot.profile import profile_trajectories

        trajs = self.held_out_trajectories()
        params = self.greedy_params()
        result = profile_trajectories(trajs, sampler, k=1, params=params, executor=self.executor(),
                                      chunk=max(16, int(self.config.eval.get("batch_size", 8))), progress=False)
        by_task: dict[str, list[float]] = {t.task_id: [] for t in trajs}
        failed = 0
        for profile in result.profiles:
            if profile.rewards:
                by_task[profile.task_id].append(min(1.0, float(profile.mean)))
            else:
                failed += 1
        per_task = [sum(v) / len(v) if v else 0.0 for v in by_task.values()]
        return per_task, {"states": len(result.profiles), "failed": failed}

    def in_domain_per_task(self, sampler: Any) -> list[float]:
        """Outcome reward (capped at 1) of one greedy episode per curve task, in task order."""
        from pivotgym.registry import make
        from pivotgym.suite import run_episodes

        params = self.greedy_params()
        kwargs = {"max_turns": int(self.config.curve["max_turns"])} if self.config.curve.get("max_turns") else {}
        rows = run_episodes(sampler, lambda: make(self.config.env, **kwargs), self.curve_tasks(), params,
                            batch_size=int(self.config.eval.get("batch_size", 8)))
        return [min(1.0, float(r["reward"])) for r in rows]

    def curve_point(self, sampler: Any) -> dict[str, Any]:
        """``{"score", "per_task", "tasks"}`` of ``sampler`` on the curve tasks (the learning curves' y axis),
        by :attr:`curve_metric` (turn accuracy points also carry ``states`` and ``failed``)."""
        extra: dict[str, int] = {}
        if self.curve_metric == "turns":
            per_task, extra = self.turn_accuracy_per_task(sampler)
        else:
            per_task = self.in_domain_per_task(sampler)
        return {"score": sum(per_task) / max(1, len(per_task)), "per_task": per_task, "tasks": len(per_task),
                "metric": self.curve_metric, **extra}

    def curve_point_from_eval(self, result: Path) -> dict[str, Any] | None:
        """The curve point read from a suite evaluation's items (``<result>.items.jsonl``) when that
        evaluation ran the same greedy episodes on every curve task (see :meth:`evaluate`); None otherwise.
        Saves a second, identical in-domain evaluation of base and SFT."""
        items = Path(str(result) + ".items.jsonl")
        if self.config.suite or not items.exists():
            return None
        member = f"{self.config.env}@test"
        rows = [r for r in read_jsonl(items) if r.get("member") == member]
        turns = self.curve_metric == "turns"
        if any((r.get("metric") == "turn_accuracy") != turns for r in rows):
            return None  # written under the other curve metric
        rewards = {r["task_id"]: float(r["reward"]) for r in rows}
        ids = self._curve_task_ids()
        if not all(i in rewards for i in ids):
            return None
        per_task = [min(1.0, rewards[i]) for i in ids]
        return {"score": sum(per_task) / max(1, len(per_task)), "per_task": per_task, "tasks": len(per_task),
                "metric": self.curve_metric, "from": str(items.name)}

    @property
    def _in_domain_metric(self) -> str:
        return "turn_accuracy" if self.curve_metric == "turns" else "success"

    def _curve_task_ids(self) -> list[str]:
        """Task ids of a curve point's ``per_task`` scores, in order."""
        if self.curve_metric == "turns":
            return list(dict.fromkeys(t.task_id for t in self.held_out_trajectories()))
        return [t.id for t in self.curve_tasks()]

    def in_domain_score(self, sampler: Any) -> float:
        """Mean outcome reward of greedy episodes on the curve tasks."""
        return float(self.curve_point(sampler)["score"])

    def rl_start_point(self, seed: int) -> dict[str, Any]:
        """Curve score and per-task scores of :meth:`rl_model` (the learning curves' first point)."""
        name = "base-curve-score.json" if self.config.rl_init == "base" else f"sft-s{seed}-curve-score.json"
        return json.loads((self.root / "eval" / name).read_text())

    def expert_task_ids(self) -> list[str]:
        """Task ids of the expert trajectories (first-seen order): the data of SFT, PivotRL and E2E RL."""
        ids = [t.task_id for t in read_trajectories(self.root / "data" / "expert.jsonl")]
        return list(dict.fromkeys(ids))

    def evaluate(self, sampler: Any, out: Path, members: Sequence[str] | None = None,
                 in_domain: list[float] | None = None) -> dict[str, Any]:
        """The suite evaluation written to ``out`` (and its items to ``<out>.items.jsonl``).

        Unless the config names a registered suite, the in-domain member ``<env>@test`` is scored by the same
        measurement as the learning curves whenever the curves are not the suite's plain episodes
        (``curve.metric: turns``, or a ``curve.max_turns`` cap the suite runner does not know), so the table and
        the curves measure one thing; ``in_domain`` passes those per-task scores when they were just measured
        (a learning curve's last point, same model) instead of measuring again. With ``curve.metric: turns``
        the capped greedy episodes are also run (``eval.episodes``, default true) and reported as the member
        ``<env>@test:episodes`` with role ``episodes``, beside turn accuracy rather than averaged into it."""
        from pivotgym.suite import evaluate_suite, role_averages, summarize

        ev = self.config.eval
        kwargs = {"limit": ev.get("limit"), "max_new_tokens": ev.get("max_new_tokens"), "model": out.stem,
                  "batch_size": int(ev.get("batch_size", 8)), "progress": True,
                  "name": self.config.suite or self.config.name}
        per_task, in_domain = in_domain, f"{self.config.env}@test"
        chosen = list(self.config.members) if members is None else list(members)
        custom = self.curve_metric == "turns" or bool(self.config.curve.get("max_turns"))
        if self.config.suite or not custom or in_domain not in chosen:
            return evaluate_suite(self.config.members, sampler, out, members=members, **kwargs)
        others = [m for m in chosen if m != in_domain]
        part = out.with_name(out.stem + ".ood.json")
        result = (evaluate_suite(self.config.members, sampler, part, members=others, **kwargs) if others else
                  {"suite": kwargs["name"], "model": out.stem, "scores": {}, "role": {}})
        scores: dict[str, Any] = {}
        roles: dict[str, str] = {}
        rows: list[dict[str, Any]] = []
        metric = self._in_domain_metric
        started = time.perf_counter()
        point = self.curve_point(sampler) if per_task is None else {"per_task": list(per_task)}
        scores[in_domain] = {**summarize(point["per_task"], metric), "seconds": round(time.perf_counter() - started, 2),
                             **{k: point[k] for k in ("states", "failed") if k in point}}
        roles[in_domain] = "in_domain"
        rows += [{"member": in_domain, "task_id": t, "reward": r, "metric": metric}
                 for t, r in zip(self._curve_task_ids(), point["per_task"])]
        if self.curve_metric == "turns" and ev.get("episodes", True):
            started = time.perf_counter()
            episodes = self.in_domain_per_task(sampler)
            key = f"{in_domain}:episodes"
            scores[key] = {**summarize(episodes, "success"), "seconds": round(time.perf_counter() - started, 2)}
            roles[key] = "episodes"
            rows += [{"member": key, "task_id": t.id, "reward": r, "metric": "success"}
                     for t, r in zip(self.curve_tasks(), episodes)]
        if self.config.curve.get("max_turns"):
            for key in scores:
                if key.endswith(":episodes") or metric == "success":
                    scores[key]["max_turns"] = int(self.config.curve["max_turns"])
        result["scores"] = {**scores, **result["scores"]}
        result["role"] = {**roles, **result["role"]}
        result["averages"] = role_averages(result["scores"], result["role"])
        ood_items = Path(str(part) + ".items.jsonl")
        write_jsonl(Path(str(out) + ".items.jsonl"), rows + (read_jsonl(ood_items) if ood_items.exists() else []))
        write_json(out, result)
        return result


def _done(*paths: Path) -> bool:
    return all(p.exists() for p in paths)


def _trainer_kwargs(run: Run, section: dict[str, Any], seed: int, out: Path, model: str | None = None
                    ) -> dict[str, Any]:
    # the experiment saves the models it needs itself (models/sft-s<seed>); a final/ folder per stage would
    # add ~0.5 GB each and its save time to the stage's wall-clock
    return {"model": model or run.config.model, "seed": seed, "output_dir": str(out), "report_to": ["jsonl"],
            "resume": "never", "save_final_model": False, **section}


def _fit_with_curve(run: Run, trainer: Any, every: int, start: dict[str, Any],
                    extra_seconds: float = 0.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train, scoring the in-domain curve tasks every ``every`` steps and after the last one.

    x values: ``turns`` = the trainer's ``total_turns`` (rollout + filtered + profiling turns); ``seconds`` =
    its wall-clock minus evaluation time, plus ``extra_seconds`` (the profiling time, for PivotRL). Each point
    keeps ``per_task`` scores (same task order in every point) for the report's bootstrap.
    """
    curve = [{"step": 0, **start}]

    def record(tr: Any, row: dict[str, Any]) -> None:
        if row["step"] % max(1, every) == 0 or row["step"] >= tr.config.steps:
            with tr.counters.time("eval"):
                point = run.curve_point(tr.sampler)
            seconds = row["wall_seconds"] - row.get("seconds_eval", 0.0) + extra_seconds
            curve.append({"step": row["step"], "turns": float(row["total_turns"]), "seconds": seconds, **point})

    summary = trainer.fit(callbacks=[record])
    return summary, curve


def optimizer_steps(section: dict[str, Any], steps: int | None = None) -> int:
    """Optimiser steps a trainer section spends: ``steps`` x ``updates_per_batch`` (1 for SFT)."""
    return int(section.get("steps", 0) if steps is None else steps) * int(section.get("updates_per_batch", 1))


def rl_total_steps(config: ExperimentConfig) -> int:
    """Optimiser steps from the base model to the end of PivotRL (SFT's included when RL starts from SFT)."""
    sft = optimizer_steps(config.sft) if config.rl_init == "sft" else 0
    return sft + optimizer_steps(config.pivot)


def matched_sft_steps(config: ExperimentConfig) -> int:
    """Extra SFT steps (continuing the SFT model) that give continued SFT as many optimiser steps as the
    PivotRL row; 0 when SFT alone already has as many."""
    return max(0, rl_total_steps(config) - optimizer_steps(config.sft))


def write_accounting(out_dir: Path, *, method: str, start: str, data: str, summary: dict[str, Any],
                     optimizer_steps: int, extra_turns: int = 0, extra_seconds: float = 0.0,
                     tasks: int | None = None) -> dict[str, Any]:
    """What one training run spent, from its trainer summary: the report's side-by-side table.

    ``rollout_turns`` counts every generated training turn (kept, filtered and profiling; ``extra_turns``
    adds profiling done outside the trainer); ``wall_seconds`` excludes evaluation and adds
    ``extra_seconds`` (profiling)."""
    c = summary.get("counters", {})
    row = {"method": method, "start": start, "data": data, "tasks": tasks, "optimizer_steps": optimizer_steps,
           "steps": int(summary.get("steps", 0)), "tokens_trained": int(c.get("tokens_trained", 0)),
           "tokens_generated": int(c.get("tokens_generated", 0)),
           "rollout_turns": int(c.get("total_turns", 0)) + extra_turns,
           "profiling_turns": int(c.get("profiling_turns", 0)) + extra_turns,
           "wall_seconds": float(c.get("wall_seconds", 0.0)) - float(c.get("seconds_eval", 0.0)) + extra_seconds}
    write_json(out_dir / "accounting.json", row)
    return row


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
        write_json(curve0, run.curve_point_from_eval(out) or run.curve_point(run.base_sampler()))


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
    curve0 = run.root / "eval" / f"sft-s{seed}-curve-score.json"
    if _done(result):
        if run.config.rl_init == "sft" and not _done(curve0):  # interrupted between evaluation and curve score
            from pivotgym.sampling.hf import HFSampler

            write_json(curve0, run.curve_point_from_eval(result)
                       or run.curve_point(HFSampler(run.rl_model(seed), max_batch_size=32)))
        return
    cfg = SFTConfig.from_dict({**_trainer_kwargs(run, run.config.sft, seed, out_dir),
                               "trajectories": str(run.root / "data" / "expert.jsonl")})
    trainer = SFTTrainer(cfg)
    summary = trainer.fit()
    write_json(out_dir / "experiment-summary.json", summary)
    write_accounting(out_dir, method="SFT", start="base", data=f"{len(run.expert_task_ids())} expert trajectories",
                     summary=summary, optimizer_steps=optimizer_steps(run.config.sft, summary["steps"]),
                     tasks=len(run.expert_task_ids()))
    if run.config.rl_init == "sft" or run.config.matched_sft:
        trainer.save_final_model(run.root / "models" / f"sft-s{seed}")
    run.evaluate(trainer.sampler, result)
    if run.config.rl_init == "sft":
        write_json(curve0, run.curve_point_from_eval(result) or run.curve_point(trainer.sampler))
    _cleanup(run, out_dir)


def stage_sft_more(run: Run, seed: int) -> None:
    """Continued SFT: the SFT model trained :func:`matched_sft_steps` more SFT steps on the same expert
    trajectories, so its optimiser steps from the base model equal PivotRL's (SFT's included)."""
    from pivotgym.train import SFTConfig, SFTTrainer

    extra = matched_sft_steps(run.config)
    out_dir = run.root / "train" / f"sft-more-s{seed}"
    result = run.root / "eval" / f"sft-more-s{seed}.json"
    if not run.config.matched_sft or extra == 0 or _done(result):
        return
    start = run.root / "models" / f"sft-s{seed}"
    if not (start / "config.json").exists():
        raise ExperimentError(f"{start} is missing: rerun the sft stage (delete {run.root}/eval/sft-s{seed}.json)")
    section = {**run.config.sft, "steps": extra}
    cfg = SFTConfig.from_dict({**_trainer_kwargs(run, section, seed, out_dir, str(start)),
                               "trajectories": str(run.root / "data" / "expert.jsonl")})
    trainer = SFTTrainer(cfg)
    summary = trainer.fit()
    write_json(out_dir / "experiment-summary.json", summary)
    write_accounting(out_dir, method="continued SFT", start="SFT", summary=summary, optimizer_steps=extra,
                     data=f"{len(run.expert_task_ids())} expert trajectories", tasks=len(run.expert_task_ids()))
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
    if full_eval:
        start = {k: v for k, v in run.rl_start_point(seed).items() if k in ("score", "per_task", "tasks")}
        summary, curve = _fit_with_curve(run, trainer, int(run.config.curve.get("every", 1)),
                                         {"turns": float(meta["turns"]), "seconds": float(meta["seconds"]), **start},
                                         extra_seconds=float(meta["seconds"]))
    else:  # ablations: only the final in-domain score is reported, so no curve evaluations
        summary, curve = trainer.fit(), []
    write_json(out_dir / "experiment-summary.json", summary)
    profiled = int(summary.get("counters", {}).get("profiling_turns", 0))
    write_accounting(out_dir, method={"pivot": "PivotRL"}.get(tag, tag), start=run.config.rl_init,
                     data=f"{len(read_jsonl(pivots))} profiled turns of {len(run.expert_task_ids())} expert "
                          "trajectories", summary=summary,
                     optimizer_steps=optimizer_steps(run.config.pivot, summary["steps"]),
                     extra_turns=0 if profiled else int(meta["turns"]), extra_seconds=float(meta["seconds"]),
                     tasks=len(run.expert_task_ids()))
    write_json(out_dir / "curve.json", curve)
    last = curve[-1].get("per_task") if curve and curve[-1]["step"] == summary["steps"] else None
    run.evaluate(trainer.sampler, result, members=None if full_eval else run.config.in_domain, in_domain=last)
    _cleanup(run, out_dir)


def stage_pivot(run: Run, seed: int) -> None:
    _pivot_run(run, seed, "pivot", run.root / "data" / f"pivots-functional-s{seed}.jsonl", "functional", True)


def expert_task_e2e(config: Any, task_ids: Sequence[str], **kwargs: Any) -> Any:
    """An :class:`~pivotgym.train.E2ETrainer` that samples only ``task_ids`` (in that order, reshuffled
    each epoch by the trainer's seed): E2E RL on exactly the tasks SFT and PivotRL learn from. Raises
    ExperimentError when one of them is not in the trainer's split."""
    from pivotgym.train import E2ETrainer
    from pivotgym.train.loop import DataOrder

    wanted = list(dict.fromkeys(task_ids))

    class ExpertTaskE2E(E2ETrainer):
        def setup_data(self) -> None:
            super().setup_data()
            missing = sorted(set(wanted) - set(self.task_ids))
            if missing or not wanted:
                raise ExperimentError(f"E2E RL: expert task(s) {missing or wanted} are not in {config.env_id}'s "
                                      f"{config.split!r} split; regenerate data/expert.jsonl")
            self.task_ids = list(wanted)
            self.order = DataOrder(len(self.task_ids), config.seed)

    return ExpertTaskE2E(config, **kwargs)


def stage_e2e(run: Run, seed: int) -> None:
    from pivotgym.train import E2EConfig

    out_dir = run.root / "train" / f"e2e-s{seed}"
    result = run.root / "eval" / f"e2e-s{seed}.json"
    if _done(result, out_dir / "curve.json"):
        return
    cfg = E2EConfig.from_dict({**_trainer_kwargs(run, run.config.e2e, seed, out_dir, run.rl_model(seed)),
                               "env_id": run.config.env})
    task_ids = run.expert_task_ids()
    trainer = expert_task_e2e(cfg, task_ids)
    start = {k: v for k, v in run.rl_start_point(seed).items() if k in ("score", "per_task", "tasks")}
    summary, curve = _fit_with_curve(run, trainer, int(run.config.curve.get("every", 1)),
                                     {"turns": 0.0, "seconds": 0.0, **start})
    write_json(out_dir / "experiment-summary.json", summary)
    write_json(out_dir / "task_ids.json", list(trainer.task_ids))
    write_accounting(out_dir, method="E2E RL", start=run.config.rl_init, summary=summary,
                     data=f"episodes on the {len(task_ids)} expert tasks",
                     optimizer_steps=optimizer_steps(run.config.e2e, summary["steps"]), tasks=len(task_ids))
    write_json(out_dir / "curve.json", curve)
    last = curve[-1].get("per_task") if curve and curve[-1]["step"] == summary["steps"] else None
    run.evaluate(trainer.sampler, result, in_domain=last)
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
    check_ids(config)  # before the run folder exists
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
        plan.append(("sft_more", lambda s=seed: stage_sft_more(run, s)))
    for seed in config.seeds:
        plan.append(("ablation", lambda s=seed: stage_ablation(run, s)))
    try:
        for name, fn in plan:
            if name not in stages:
                continue
            started = time.perf_counter()
            print(f"[experiment] stage {name}", flush=True)
            fn()
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - started
            write_json(root / "timings.json", timings)
    finally:
        run.close()
    summary: dict[str, Any] = {"name": config.name, "root": str(root)}
    if "report" in stages:
        summary = write_experiment_report(run.root, config)
    return summary


__all__ = ["CURVE_METRICS", "ExperimentConfig", "ExperimentError", "Run", "STAGES", "check_experiment_types", "check_ids", "expert_task_e2e", "load_experiment",
           "matched_sft_steps", "optimizer_steps", "rl_total_steps", "run_experiment", "write_accounting"]
