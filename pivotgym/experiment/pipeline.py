"""``run_experiment``: check every stage's fingerprint against the run folder, then run (or resume) the
stages and write the report."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pivotgym.errors import ConfigError, PivotgymError
from pivotgym.eval import write_json
from pivotgym.experiment.config import ExperimentConfig, check_ids
from pivotgym.experiment.fingerprint import (
    StageRecord,
    fingerprint,
    recorded_changes,
    stage_changed,
    stage_inputs,
    stage_plan,
    verifier_versions,
)
from pivotgym.experiment.layout import STAGES, RunLayout, downstream, upstream

__all__ = ["run_experiment"]


def _check_stage_names(names: Sequence[str], option: str) -> None:
    unknown = [s for s in names if s not in STAGES]
    if unknown:
        raise ConfigError(f"{option}: unknown stage(s) {', '.join(unknown)}; stages are {', '.join(STAGES)}")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


@contextlib.contextmanager
def _file_lock(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """An exclusive ``fcntl`` lock on ``path`` for the block; yields whether it is held (always, when
    ``wait``). The lock goes with its process, so a killed run leaves none behind."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def _add_seconds(path: Path, key: str, seconds: float) -> None:
    """Add ``seconds`` to ``key``'s total (one stage run: ``pivot-s0``, ``base``) in the timings file, read
    and written under an exclusive lock: runs of other seeds in the same folder (``--seeds 1,2`` and
    ``--seeds 3,4`` side by side) add theirs to the same file without losing one another's."""
    with _file_lock(path.with_name(path.name + ".lock")):
        timings: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}
        timings[key] = timings.get(key, 0.0) + seconds
        write_json(path, timings)


def _drop_seconds(path: Path, keys: Sequence[str]) -> None:
    """Forget the seconds of the stage runs ``keys`` (recomputed by ``--rerun``: their results, and so the
    time they took, are gone)."""
    with _file_lock(path.with_name(path.name + ".lock")):
        if path.exists():
            timings: dict[str, float] = json.loads(path.read_text())
            write_json(path, {k: v for k, v in timings.items() if k not in keys})


@contextlib.contextmanager
def _stage_lock(record: Path, which: str) -> Iterator[None]:
    """Hold an exclusive lock on one stage's run while it runs, so that two processes on one run folder
    (other seeds side by side) never run the same stage at once."""
    with _file_lock(record.with_suffix(".lock"), wait=False) as held:
        if not held:
            raise PivotgymError(
                f"stage {which} is running in another process on {record.parent.parent}",
                hint="give each process its own seeds (--seeds 1,2 beside --seeds 3,4) once the shared stages "
                "(base, expert) are done, or wait for the other run",
            )
        yield


@contextlib.contextmanager
def judge_environment(settings: dict[str, Any]) -> Iterator[None]:
    """``$PIVOTGYM_JUDGE`` set to the config's ``judge`` arguments while the run lasts (so every process the run
    starts builds the same ``judge`` verifier), and restored afterwards; nothing changes when they are empty."""
    import os

    from pivotgym.verify.llm_judge import JUDGE_ENV

    if not settings:
        yield
        return
    before = os.environ.get(JUDGE_ENV)
    os.environ[JUDGE_ENV] = json.dumps(settings)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(JUDGE_ENV, None)
        else:
            os.environ[JUDGE_ENV] = before


def run_experiment(
    config: ExperimentConfig,
    out_dir: str | Path | None = None,
    stages: Sequence[str] | None = None,
    rerun: Sequence[str] = (),
) -> dict[str, Any]:
    """Run (or resume) every stage of ``config`` in ``out_dir`` (default ``runs/<name>``) and write the
    report; returns the summary (also ``summary.json``).

    ``stages`` limits which stages run. A finished stage whose fingerprint matches is skipped; one whose
    fingerprint differs (the config changed since it ran) raises :class:`~pivotgym.errors.StageChanged`
    before anything runs or is written, unless ``rerun`` names it or a stage upstream of it: those stages
    are deleted and recomputed, with everything downstream of them (whatever ``stages`` says). The config's
    ``judge`` arguments are the environment of the run (:func:`judge_environment`)."""
    with judge_environment(config.judge):
        return _run_experiment(config, out_dir, stages, rerun)


def _run_experiment(
    config: ExperimentConfig, out_dir: str | Path | None, stages: Sequence[str] | None, rerun: Sequence[str]
) -> dict[str, Any]:
    from pivotgym.experiment.provenance import run_provenance
    from pivotgym.experiment.report import write_experiment_report
    from pivotgym.experiment.run import Run

    chosen = list(stages or STAGES)
    _check_stage_names(chosen, "stages")
    _check_stage_names(rerun, "--rerun")
    check_ids(config)  # before the run folder exists
    layout = RunLayout(Path(out_dir) if out_dir else Path("runs") / config.name)
    redo = set(downstream(rerun, config.rl_init))
    chosen += [s for s in STAGES if s in redo and s not in chosen]  # a recomputed stage's downstream runs too

    # every fingerprint first: a changed stage stops the run before a model loads or a file is written
    verifiers = verifier_versions(config.env, config.verifier)
    plan = stage_plan(config.seeds)
    inputs: dict[tuple[str, int | None], dict[str, Any]] = {}
    prints: dict[tuple[str, int | None], str] = {}
    changed: dict[tuple[str, int | None], list[str]] = {}
    for stage, seed in plan:
        ups = {}
        for name in upstream(stage, config.rl_init):
            ups[name] = prints[(name, None) if (name, None) in prints else (name, seed)]
        inputs[(stage, seed)] = stage_inputs(config, stage, seed, ups, verifiers)
        prints[(stage, seed)] = fingerprint(inputs[(stage, seed)])
        if stage not in redo and (changes := recorded_changes(layout, stage, seed, inputs[(stage, seed)])):
            changed[(stage, seed)] = changes
    if changed:
        raise stage_changed(layout, changed, config.rl_init, config.path)

    layout.make_dirs()
    redone = [(stage, seed) for stage, seed in plan if stage in redo]
    for stage, seed in redone:  # --rerun: the stage's old outputs go, so it cannot skip any of them
        for path in [*layout.outputs(stage, seed), layout.record(stage, seed)]:
            _remove(path)
    if redone:
        _drop_seconds(layout.timings, [layout.record(stage, seed).stem for stage, seed in redone])
    provenance = run_provenance(config)
    write_json(layout.config, {**config.to_dict(), "provenance": provenance})
    run = Run(config, layout.root)
    from pivotgym.experiment.stages import STAGE_FUNCTIONS

    try:
        for stage, seed in plan:
            if stage not in chosen:
                continue
            which = stage if seed is None else f"{stage} (seed {seed})"
            path = layout.record(stage, seed)
            with _stage_lock(path, which):  # read under the lock: another process may have just finished it
                record = StageRecord.read(path)
                if record is not None and record.status == "done":
                    print(f"[experiment] stage {which}: done, skipped", flush=True)
                    continue
                print(f"[experiment] stage {which}", flush=True)
                started = time.perf_counter()
                record = StageRecord(stage, seed, prints[(stage, seed)], inputs[(stage, seed)], code=provenance["code"])
                record.write(path)
                function = STAGE_FUNCTIONS[stage]
                try:
                    function(run) if seed is None else function(run, seed)
                finally:
                    run.release_samplers()  # the stage's engines, before the next stage opens its own
                record.status = "done"
                record.write(path)
            elapsed = time.perf_counter() - started
            _add_seconds(layout.timings, path.stem, elapsed)
            print(f"[experiment] stage {which}: done in {elapsed:.0f} s", flush=True)
    finally:
        run.close()
    if "report" not in chosen:
        return {"name": config.name, "root": str(layout.root)}
    return write_experiment_report(layout, config)
