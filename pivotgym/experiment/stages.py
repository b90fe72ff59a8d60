"""The experiment's stages. Each writes the outputs :meth:`RunLayout.outputs` lists for it and skips the
outputs that already exist, so a stage interrupted halfway resumes where it stopped (whether a finished stage
runs at all is the pipeline's decision, from its fingerprint record)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pivotgym.errors import ConfigError, PivotgymError
from pivotgym.eval import write_json
from pivotgym.experiment.accounting import matched_sft_steps, optimizer_steps, write_accounting
from pivotgym.experiment.clock import StageClock
from pivotgym.experiment.config import curve_steps
from pivotgym.experiment.layout import ABLATION_TAGS, METHOD_LABELS
from pivotgym.experiment.run import Run
from pivotgym.jsonl import read_jsonl, read_profiles, read_trajectories, write_jsonl, write_pivot_set

__all__ = [
    "STAGE_FUNCTIONS",
    "expert_task_e2e",
    "stage_ablation",
    "stage_base",
    "stage_e2e",
    "stage_expert",
    "stage_pivot",
    "stage_profile",
    "stage_sft",
    "stage_sft_more",
    "stage_warmup",
    "trainer_kwargs",
]


def _done(*paths: Path) -> bool:
    return all(p.exists() for p in paths)


def trainer_sampler_options(sampler: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The run's ``sampler_options`` as a trainer takes them: the live ``hf`` sampler wraps the model being
    trained, so the options that load a model in some dtype or on some device stay with the samplers of saved
    models (evaluation, profiling); the trainer's precision is its section's ``mixed_precision``."""
    from pivotgym.train.config import LIVE_MODEL_OPTIONS
    from pivotgym.train.policy_sampler import LIVE_SAMPLER

    if sampler != LIVE_SAMPLER:
        return dict(options)
    return {k: v for k, v in options.items() if k not in LIVE_MODEL_OPTIONS}


def trainer_kwargs(
    run: Run, section: Mapping[str, Any], seed: int, out: Path, model: str | None = None
) -> dict[str, Any]:
    """The trainer config of one training run: the experiment's defaults, then the config's section."""
    # the experiment saves the models it needs itself (models/sft-s<seed>); a final/ folder per stage would
    # add ~0.5 GB each and its save time to the stage's wall-clock. The trainers sample with the run's sampler
    # (a vllm engine of their own, kept in step with the policy), so the engines the run opened are closed first.
    run.release_samplers()
    return {
        "model": model or run.config.model,
        "seed": seed,
        "output_dir": str(out),
        "report_to": ["jsonl"],
        "resume": "never",
        "save_final_model": False,
        "sampler": run.config.sampler,
        "sampler_options": trainer_sampler_options(run.config.sampler, run.config.sampler_options),
        **section,
    }


def _cleanup(run: Run, tag: str, seed: int) -> None:
    """Delete a finished training run's checkpoints unless the config keeps them."""
    if not run.config.keep_checkpoints:
        shutil.rmtree(run.layout.checkpoints(tag, seed), ignore_errors=True)


#: the costs of a curve's start point on the axes only training spends (rollout turns and seconds are given
#: by the caller: PivotRL starts after profiling)
CURVE_START_COSTS = {"optimizer_steps": 0.0, "tokens_trained": 0.0, "lr_sum": 0.0, "drift_rms": 0.0}


def _fit_with_curve(
    run: Run, trainer: Any, start: dict[str, Any], extra_seconds: float = 0.0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train, scoring the in-domain curve tasks after the steps :func:`curve_steps` picks (the last one always).

    x values: ``turns`` = the trainer's ``total_turns`` (rollout + filtered + profiling turns); ``seconds`` =
    its wall-clock minus evaluation time, plus ``extra_seconds`` (the profiling time, for PivotRL);
    ``optimizer_steps`` applied, ``tokens_trained``, ``lr_sum`` (the sum of the learning rates of the applied
    optimiser steps) and the weights' ``drift_rms`` from the start (None where the trainer does not track it):
    the budgets the report can match. Each point keeps ``per_task`` scores (same task order in every point).
    """
    at = curve_steps(run.config.curve, trainer.config.steps)
    spent = {"lr_sum": 0.0}
    curve = [{"step": 0, **start, **CURVE_START_COSTS}]

    def record(tr: Any, row: dict[str, Any]) -> None:
        if not row.get("skipped"):  # the rate of each optimiser step this training step applied
            spent["lr_sum"] += float(row.get("lr") or 0.0) * getattr(tr.config, "updates_per_batch", 1)
        if row["step"] in at:
            with tr.counters.time("eval"):
                point = run.curve_point(tr.sampler)
            seconds = row["wall_seconds"] - row.get("seconds_eval", 0.0) + extra_seconds
            curve.append(
                {
                    "step": row["step"],
                    "turns": float(row["total_turns"]),
                    "seconds": seconds,
                    "optimizer_steps": float(row.get("optimizer_steps_applied", row["step"])),
                    "tokens_trained": float(row.get("tokens_trained", 0)),
                    "lr_sum": spent["lr_sum"],
                    "drift_rms": row.get("drift_rms"),
                    **point,
                }
            )

    summary = trainer.fit(callbacks=[record])
    return summary, curve


def _start(run: Run, seed: int) -> dict[str, Any]:
    return {k: v for k, v in run.rl_start_point(seed).items() if k in ("score", "per_task", "tasks")}


# ----------------------------------------------------------------------------------------- stages
def stage_base(run: Run) -> None:
    """Evaluate the base model on the suite; its curve score is the learning curves' start (``rl_init: base``).
    With ``curve.metric: turns`` it also measures the in-domain floors on the held-out states."""
    out, curve0 = run.layout.result("base"), run.layout.curve_start("base")
    if not _done(out):
        run.evaluate(run.base_sampler(), out)
    if not _done(curve0):
        write_json(curve0, run.curve_point_from_eval(out) or run.curve_point(run.base_sampler()))
    if run.curve_metric == "turns" and not _done(run.layout.floors):
        write_json(run.layout.floors, run.floors())


def stage_expert(run: Run) -> None:
    """Expert trajectories on the train split: the successful ones of the first ``train_tasks`` tasks (the
    training data), and with ``rl_init: warmup`` those of the next ``warmup_tasks`` tasks (the warm-up
    model's own set, disjoint from the training data by task)."""
    out, warm = run.layout.expert, run.layout.warmup_expert
    warmup = run.config.warmup_tasks if run.config.rl_init == "warmup" else 0
    if _done(out) and (not warmup or _done(warm)):
        return
    train = run.config.train_tasks
    produced = list(run.env().expert_trajectories("train", limit=None if train is None else train + warmup))
    data = [t for t in produced[:train] if t.reward > 0]
    if not data:
        raise ConfigError(f"{run.config.env}: no successful expert trajectory on the train split")
    if warmup:
        rest = [t for t in produced[train:] if t.reward > 0]
        if not rest:
            raise ConfigError(
                f"{run.config.env}: no successful expert trajectory among the {warmup} train tasks after the first "
                f"{train}, so the warm-up model has no data; lower train_tasks or raise warmup_tasks"
            )
        write_jsonl(warm, rest)
    write_jsonl(out, data)


def stage_warmup(run: Run, seed: int) -> None:
    """The warm-up model (``rl_init: warmup``): SFT from the base model on the warm-up trajectories only (a
    separate set, so that the model profiling the turns never trained on them), saved as every method's
    start and evaluated like the others. Does nothing under another ``rl_init``."""
    from pivotgym.train import SFTConfig, SFTTrainer

    if run.config.rl_init != "warmup":
        return
    layout = run.layout
    out_dir, result, curve0 = (
        layout.train_dir("warmup", seed),
        layout.result("warmup", seed),
        layout.curve_start("warmup", seed),
    )
    if _done(result, curve0) and layout.model_saved("warmup", seed):
        return
    cfg = SFTConfig.from_dict(
        {**trainer_kwargs(run, run.config.warmup, seed, out_dir), "trajectories": str(layout.warmup_expert)}
    )
    trainer = run.own(SFTTrainer(cfg))
    summary = trainer.fit()
    write_json(layout.trainer_summary("warmup", seed), summary)
    tasks = len({t.task_id for t in read_trajectories(layout.warmup_expert)})
    write_accounting(
        layout.accounting("warmup", seed),
        method=METHOD_LABELS["warmup"],
        start="base",
        data=f"{tasks} separate expert trajectories",
        summary=summary,
        optimizer_steps=optimizer_steps(run.config.warmup, summary["steps"]),
        tasks=tasks,
    )
    trainer.save_final_model(layout.model("warmup", seed))
    run.evaluate(trainer.sampler, result)
    write_json(curve0, run.start_point(trainer.sampler, result))
    _cleanup(run, "warmup", seed)


def stage_sft(run: Run, seed: int) -> None:
    """The SFT baseline on the expert trajectories (a learning curve from the model it starts from, unless it is
    itself the RL start model), then its suite evaluation."""
    from pivotgym.train import SFTConfig, SFTTrainer

    layout = run.layout
    out_dir, result, curve0 = layout.train_dir("sft", seed), layout.result("sft", seed), layout.curve_start("sft", seed)
    if _done(result):
        if run.config.rl_init == "sft" and not _done(curve0):  # interrupted between evaluation and curve score
            write_json(curve0, run.curve_point_from_eval(result) or run.curve_point(run.rl_sampler(seed)))
        return
    start = run.rl_start if run.rl_start == "warmup" else "base"  # SFT starts from the warm-up model too
    model = run.rl_model(seed) if start == "warmup" else None
    cfg = SFTConfig.from_dict(
        {**trainer_kwargs(run, run.config.sft, seed, out_dir, model), "trajectories": str(layout.expert)}
    )
    trainer = run.own(SFTTrainer(cfg))
    curve: list[dict[str, Any]] = []
    if run.config.rl_init == "sft":  # SFT is the RL start model: no curve of its own to compare along
        summary = trainer.fit()
    else:  # a learning curve from the start model it shares with PivotRL: claim (b) along every budget
        summary, curve = _fit_with_curve(run, trainer, {"turns": 0.0, "seconds": 0.0, **_start(run, seed)})
        write_json(layout.curve("sft", seed), curve)
    write_json(layout.trainer_summary("sft", seed), summary)
    tasks = len(run.expert_task_ids())
    write_accounting(
        layout.accounting("sft", seed),
        method=METHOD_LABELS["sft"],
        start=start,
        data=f"{tasks} expert trajectories",
        summary=summary,
        optimizer_steps=optimizer_steps(run.config.sft, summary["steps"]),
        tasks=tasks,
    )
    if run.config.rl_init == "sft" or run.config.matched_sft:
        trainer.save_final_model(layout.model("sft", seed))
    last = curve[-1] if curve and curve[-1]["step"] == summary["steps"] else None
    run.evaluate(trainer.sampler, result, in_domain=last)
    if run.config.rl_init == "sft":
        write_json(curve0, run.start_point(trainer.sampler, result))
    _cleanup(run, "sft", seed)


def stage_sft_more(run: Run, seed: int) -> None:
    """Continued SFT: the SFT model trained :func:`matched_sft_steps` more SFT steps on the same expert
    trajectories, so its optimiser steps from the base model equal PivotRL's (SFT's included)."""
    from pivotgym.train import SFTConfig, SFTTrainer

    layout = run.layout
    extra = matched_sft_steps(run.config)
    out_dir, result = layout.train_dir("sft-more", seed), layout.result("sft-more", seed)
    if not run.config.matched_sft or extra == 0 or _done(result):
        return
    start = layout.model("sft", seed)
    if not layout.model_saved("sft", seed):
        raise PivotgymError(f"{start} is missing", hint="recompute it: pivotgym experiment CONFIG --rerun sft")
    section = {**run.config.sft, "steps": extra}
    cfg = SFTConfig.from_dict(
        {**trainer_kwargs(run, section, seed, out_dir, str(start)), "trajectories": str(layout.expert)}
    )
    trainer = run.own(SFTTrainer(cfg))
    summary = trainer.fit()
    write_json(layout.trainer_summary("sft-more", seed), summary)
    tasks = len(run.expert_task_ids())
    write_accounting(
        layout.accounting("sft-more", seed),
        method=METHOD_LABELS["sft-more"],
        start="sft",
        summary=summary,
        optimizer_steps=extra,
        data=f"{tasks} expert trajectories",
        tasks=tasks,
    )
    run.evaluate(trainer.sampler, result)
    _cleanup(run, "sft-more", seed)


def stage_profile(run: Run, seed: int, verifier: str = "functional") -> None:
    """Profile every expert turn with the frozen RL start model, then select pivots (and random turns).

    Samples are capped by the env's own generation limit, which ``profile.max_new_tokens`` can only shorten."""
    from pivotgym.pivot.profile import profile_trajectories
    from pivotgym.pivot.select import select_pivots
    from pivotgym.types import PivotSet

    layout, section = run.layout, run.config.profile
    profiles_path, meta_path = layout.profiles(verifier, seed), layout.profiles_meta(verifier, seed)
    if not _done(meta_path):
        config = section.to_config(seed, run.reward_verifier(verifier), run.generation_cap(section.max_new_tokens))
        with StageClock(layout.profiles_clock(verifier, seed)) as clock:  # counts killed attempts too
            result = profile_trajectories(
                read_trajectories(layout.expert),
                run.rl_sampler(seed),
                out=profiles_path,
                executor=run.config.executor,
                config=config,
            )
        write_json(
            meta_path,
            {
                "seconds": clock.total,
                "attempts": len(clock.earlier),
                "stats": result.stats,
                "turns": sum(pr.k for pr in result.profiles),
            },
        )
    pivots_path, selection_path = layout.pivots(verifier, seed), layout.selection(verifier, seed)
    if not _done(pivots_path, selection_path):
        profiles = read_profiles(profiles_path)
        pivot_set = select_pivots(profiles, run.config.select)
        write_pivot_set(pivots_path, pivot_set)
        write_json(selection_path, {"rule": pivot_set.rule, "stats": pivot_set.stats, "pivots": len(pivot_set.pivots)})
        if verifier == "functional":
            rng = random.Random(seed)
            chosen = rng.sample(profiles, min(len(profiles), max(1, len(pivot_set.pivots))))
            write_pivot_set(
                layout.pivots("random", seed), PivotSet(rule={"random_turns": len(chosen), "seed": seed}, pivots=chosen)
            )


def _pivot_run(
    run: Run,
    seed: int,
    tag: str,
    pivots: Path,
    verifier: str,
    full_eval: bool,
    overrides: Mapping[str, Any] | None = None,
) -> None:
    """One PivotRL run on ``pivots``; ``full_eval``: a learning curve and the whole suite (else the final
    in-domain score only, for the ablations); ``overrides``: trainer fields of this run only (the placebo)."""
    from pivotgym.train import PivotConfig, PivotTrainer

    layout = run.layout
    out_dir, result = layout.train_dir(tag, seed), layout.result(tag, seed)
    if _done(result, layout.curve(tag, seed)):
        return
    if not read_jsonl(pivots):
        write_json(layout.curve(tag, seed), [])
        write_json(result, {"suite": "inline", "model": tag, "scores": {}, "role": {}, "skipped": "no pivots"})
        return
    profiled = "functional" if verifier == "functional" else "exact"
    meta = json.loads(layout.profiles_meta(profiled, seed).read_text())
    cfg = PivotConfig.from_dict(
        {
            **trainer_kwargs(run, {**run.config.pivot, **(overrides or {})}, seed, out_dir, run.rl_model(seed)),
            "pivots": str(pivots),
            "trajectories": str(layout.expert),
            "profiles": str(layout.profiles(profiled, seed)),
            "verifier": run.reward_verifier(verifier),
        }
    )
    trainer = run.own(PivotTrainer(cfg))
    if full_eval:
        start = {"turns": float(meta["turns"]), "seconds": float(meta["seconds"]), **_start(run, seed)}
        summary, curve = _fit_with_curve(run, trainer, start, extra_seconds=float(meta["seconds"]))
    else:  # ablations: only the final in-domain score is reported, so no curve evaluations
        summary, curve = trainer.fit(), []
    write_json(layout.trainer_summary(tag, seed), summary)
    in_trainer = int(summary.get("counters", {}).get("profiling_turns", 0))
    tasks = len(run.expert_task_ids())
    write_accounting(
        layout.accounting(tag, seed),
        method=METHOD_LABELS[tag],
        start=run.config.rl_init,
        data=f"{len(read_jsonl(pivots))} profiled turns of {tasks} expert trajectories",
        summary=summary,
        optimizer_steps=optimizer_steps(run.config.pivot, summary["steps"]),
        extra_turns=0 if in_trainer else int(meta["turns"]),
        extra_seconds=float(meta["seconds"]),
        tasks=tasks,
    )
    write_json(layout.curve(tag, seed), curve)
    last = curve[-1] if curve and curve[-1]["step"] == summary["steps"] else None
    run.evaluate(trainer.sampler, result, members=None if full_eval else run.config.in_domain, in_domain=last)
    _cleanup(run, tag, seed)


def stage_pivot(run: Run, seed: int) -> None:
    """PivotRL on the functional pivots: a learning curve, then the suite evaluation."""
    _pivot_run(run, seed, "pivot", run.layout.pivots("functional", seed), "functional", True)


def expert_task_e2e(config: Any, task_ids: Sequence[str], **kwargs: Any) -> Any:
    """An :class:`~pivotgym.train.E2ETrainer` that samples only ``task_ids`` (in that order, reshuffled
    each epoch by the trainer's seed): E2E RL on exactly the tasks SFT and PivotRL learn from. Raises
    ConfigError when one of them is not in the trainer's split."""
    from pivotgym.train import E2ETrainer
    from pivotgym.train.loop import DataOrder

    wanted = list(dict.fromkeys(task_ids))

    class ExpertTaskE2E(E2ETrainer):
        def setup_data(self) -> None:
            super().setup_data()
            available: list[str] = list(self.task_ids)  # type: ignore[has-type]  # set by E2ETrainer.setup_data
            missing = sorted(set(wanted) - set(available))
            if missing or not wanted:
                raise ConfigError(
                    f"E2E RL: expert task(s) {missing or wanted} are not in {config.env_id}'s "
                    f"{config.split!r} split; rerun the expert stage (--rerun expert)"
                )
            self.task_ids = list(wanted)
            self.order = DataOrder(len(self.task_ids), config.seed)

    return ExpertTaskE2E(config, **kwargs)


def stage_e2e(run: Run, seed: int) -> None:
    """End-to-end RL on exactly the expert tasks: a learning curve, then the suite evaluation."""
    _e2e_run(run, seed, "e2e", full_eval=True)


def _e2e_run(run: Run, seed: int, tag: str, full_eval: bool, overrides: Mapping[str, Any] | None = None) -> None:
    """One E2E RL run on exactly the expert tasks; ``full_eval``: a learning curve and the whole suite (else
    the final in-domain score only, for the ablations); ``overrides``: trainer fields of this run only."""
    from pivotgym.train import E2EConfig

    layout = run.layout
    out_dir, result = layout.train_dir(tag, seed), layout.result(tag, seed)
    if _done(result, layout.curve(tag, seed)):
        return
    section = {**run.config.e2e, **(overrides or {})}
    cfg = E2EConfig.from_dict(
        {**trainer_kwargs(run, section, seed, out_dir, run.rl_model(seed)), "env_id": run.config.env}
    )
    task_ids = run.expert_task_ids()
    trainer = run.own(expert_task_e2e(cfg, task_ids))
    if full_eval:
        summary, curve = _fit_with_curve(run, trainer, {"turns": 0.0, "seconds": 0.0, **_start(run, seed)})
    else:
        summary, curve = trainer.fit(), []
    write_json(layout.trainer_summary(tag, seed), summary)
    write_json(layout.task_ids(tag, seed), list(trainer.task_ids))
    write_accounting(
        layout.accounting(tag, seed),
        method=METHOD_LABELS[tag],
        start=run.config.rl_init,
        summary=summary,
        data=f"episodes on the {len(task_ids)} expert tasks"
        + (", from states of their expert trajectories" if section.get("start") == "expert" else ""),
        optimizer_steps=optimizer_steps(section, summary["steps"]),
        tasks=len(task_ids),
    )
    write_json(layout.curve(tag, seed), curve)
    last = curve[-1] if curve and curve[-1]["step"] == summary["steps"] else None
    run.evaluate(trainer.sampler, result, members=None if full_eval else run.config.in_domain, in_domain=last)
    _cleanup(run, tag, seed)


def stage_ablation(run: Run, seed: int) -> None:
    """PivotRL on as many random profiled turns, PivotRL profiled and trained with exact-match rewards, the
    placebo (PivotRL on the same pivots with advantages shuffled inside each group), E2E RL rewarded by the
    env's partial progress instead of the outcome, and E2E RL from states of the expert trajectories."""
    layout = run.layout
    if "random_turns" in run.config.ablations:
        _pivot_run(run, seed, ABLATION_TAGS["random_turns"], layout.pivots("random", seed), "functional", False)
    if "exact_reward" in run.config.ablations:
        stage_profile(run, seed, verifier="exact")
        _pivot_run(run, seed, ABLATION_TAGS["exact_reward"], layout.pivots("exact", seed), "exact", False)
    if "e2e_progress" in run.config.ablations:
        _e2e_run(run, seed, ABLATION_TAGS["e2e_progress"], False, {"reward": "progress"})
    if "e2e_expert_states" in run.config.ablations:
        _e2e_run(run, seed, ABLATION_TAGS["e2e_expert_states"], False, {"start": "expert"})
    if "placebo" in run.config.ablations:
        pivots = layout.pivots("functional", seed)
        _pivot_run(run, seed, ABLATION_TAGS["placebo"], pivots, "functional", False, {"placebo": True})


#: stage name -> its function (seedless stages take the run only)
STAGE_FUNCTIONS: dict[str, Callable[..., None]] = {
    "base": stage_base,
    "expert": stage_expert,
    "warmup": stage_warmup,
    "sft": stage_sft,
    "profile": stage_profile,
    "pivot": stage_pivot,
    "e2e": stage_e2e,
    "sft-more": stage_sft_more,
    "ablation": stage_ablation,
}
