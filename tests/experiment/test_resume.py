"""Resume notices config changes: each stage's fingerprint is checked before anything runs; ``--rerun STAGE``
recomputes that stage and its downstream stages and keeps the upstream ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivotgym.errors import StageChanged
from pivotgym.experiment import downstream, load_experiment, run_experiment, upstream
from pivotgym.experiment.layout import STAGES


def test_the_dependency_graph_runs_one_way():
    assert downstream(["pivot"], "sft") == ["pivot", "sft-more", "ablation", "report"]
    assert downstream(["sft"], "base") == ["sft", "sft-more", "report"]
    assert downstream(["sft"], "sft") == ["sft", "profile", "pivot", "e2e", "sft-more", "ablation", "report"]
    assert downstream(["base"], "base") == ["base", "pivot", "e2e", "sft-more", "ablation", "report"]
    assert downstream(["expert"], "base") == [s for s in STAGES if s != "base"]
    # rl_init: warmup - every method starts from the warm-up model, which profiles the turns
    assert downstream(["warmup"], "warmup") == [
        "warmup",
        "sft",
        "profile",
        "pivot",
        "e2e",
        "sft-more",
        "ablation",
        "report",
    ]
    assert downstream(["warmup"], "base") == ["warmup", "report"]
    for stage in STAGES:  # every upstream stage runs earlier
        ups = upstream(stage, "sft") + upstream(stage, "base") + upstream(stage, "warmup")
        assert all(STAGES.index(u) < STAGES.index(stage) for u in ups)


def _mtimes(root: Path, *patterns: str) -> dict[Path, float]:
    return {p: p.stat().st_mtime_ns for pattern in patterns for p in root.glob(pattern)}


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_a_changed_stage_stops_the_rerun_until_told_to_recompute_it(
    mini_experiment, arith_registry, tmp_path, capsys, monkeypatch
):
    from pivotgym.cli import main

    root = tmp_path / "run"
    path = mini_experiment(tmp_path / "mini.yaml")
    run_experiment(load_experiment(path), out_dir=root)
    assert json.loads((root / "stages" / "pivot-s0.json").read_text())["status"] == "done"
    assert json.loads((root / "train" / "sft-more-s0" / "accounting.json").read_text())["optimizer_steps"] == 2
    recorded = (root / "config.json").read_text()
    upstream_files = ("eval/base*", "eval/sft-s0*", "eval/e2e-s0*", "data/*", "train/sft-s0/*", "train/e2e-s0/*")
    kept = _mtimes(root, *upstream_files)

    mini_experiment(path, pivot={"steps": 3})
    with pytest.raises(StageChanged) as info:
        run_experiment(load_experiment(path), out_dir=root)
    message = str(info.value)
    assert "stage pivot (seed 0)" in message and "pivot.steps: 2 -> 3" in message
    assert f"pivotgym experiment {path} --rerun pivot`" in message and "--out" in message
    assert "changed too: sft-more (seed 0)" in message  # continued SFT matches PivotRL's steps: downstream
    assert (root / "config.json").read_text() == recorded  # not overwritten by the changed config
    capsys.readouterr()
    assert main(["experiment", str(path), "--out", str(root)]) == 1  # the command says the same in one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pivot.steps: 2 -> 3" in err[0] and "--rerun pivot" in err[0]

    report = (root / "report.md").read_text()
    assert f"every stage computed by revision `{json.loads(recorded)['provenance']['code']['revision']}`" in report

    # the recomputed stages are another revision's: the report says which stages each revision computed
    later = {"revision": "f" * 40, "dirty": False}
    monkeypatch.setattr("pivotgym.experiment.provenance.code_revision", lambda: later)
    timings = json.loads((root / "timings.json").read_text())
    assert {"base", "pivot-s0", "sft-more-s0", "ablation-s0"} <= set(timings)  # seconds per stage run
    (root / "timings.json").write_text(json.dumps({**timings, "pivot-s0": 1e6}))  # as if the first run took long
    assert main(["experiment", str(path), "--out", str(root), "--rerun", "pivot"]) == 0
    rerun = json.loads((root / "timings.json").read_text())
    assert rerun["pivot-s0"] < 1e6 and rerun["base"] == timings["base"]  # a recomputed stage's time replaces
    assert f"| pivot | {rerun['pivot-s0']:.0f} |" in (root / "report.md").read_text()
    stage_code = json.loads((root / "summary.json").read_text())["provenance"]["stage_code"]
    assert len(stage_code) == 2 and stage_code[1] == {**later, "stages": ["pivot-s0", "sft-more-s0", "ablation-s0"]}
    assert "base" in stage_code[0]["stages"] and "pivot-s0" not in stage_code[0]["stages"]
    report = (root / "report.md").read_text()
    assert "stages computed by 2 code revisions" in report
    assert f"  - revision `{'f' * 40}`: pivot-s0, sft-more-s0, ablation-s0" in report
    curve = json.loads((root / "train" / "pivot-s0" / "curve.json").read_text())
    assert [p["step"] for p in curve] == [0, 1, 2, 3]  # PivotRL recomputed with 3 steps
    assert json.loads((root / "train" / "sft-more-s0" / "accounting.json").read_text())["optimizer_steps"] == 3
    assert _mtimes(root, *upstream_files) == kept  # base, expert, SFT, profile and E2E RL untouched
    assert json.loads((root / "config.json").read_text())["pivot"]["steps"] == 3
    run_experiment(load_experiment(path), out_dir=root)  # and the next plain rerun finds nothing changed

    mini_experiment(path, pivot={"steps": 3}, sft={"progress": True})  # a display option is not an input
    run_experiment(load_experiment(path), out_dir=root)
    mini_experiment(path, pivot={"steps": 3}, sft={"steps": 2})  # a change upstream names the first stage it touches
    with pytest.raises(StageChanged, match=r"stage sft \(seed 0\).*sft\.steps: 1 -> 2.*--rerun sft"):
        run_experiment(load_experiment(path), out_dir=root)


def test_a_stage_running_in_another_process_is_refused_not_run_twice(mini_experiment, arith_registry, tmp_path):
    """Other seeds may run side by side on one folder; the same stage at once is an error naming it."""
    import multiprocessing

    from pivotgym.errors import PivotgymError

    root = tmp_path / "run"
    path = mini_experiment(tmp_path / "mini.yaml")
    (root / "stages").mkdir(parents=True)
    holder = multiprocessing.get_context("spawn").Process(target=_hold_lock, args=(str(root / "stages" / "base.lock"),))
    ready = root / "stages" / "base.lock.held"
    holder.start()
    try:
        for _ in range(600):
            if ready.exists():
                break
            holder.join(0.05)
        with pytest.raises(PivotgymError, match=r"stage base is running in another process") as info:
            run_experiment(load_experiment(path), out_dir=root)
        assert "--seeds" in str(info.value.hint)
        assert not (root / "eval" / "base.json").exists()
    finally:
        holder.terminate()
        holder.join()
    # the lock went with its process: the same run now goes ahead
    run_experiment(load_experiment(path), out_dir=root, stages=["base"])
    assert (root / "eval" / "base.json").exists()


def _hold_lock(path: str) -> None:
    import fcntl
    import time

    lock = open(path, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    Path(path + ".held").touch()
    time.sleep(600)
