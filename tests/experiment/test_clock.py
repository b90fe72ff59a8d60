"""The stage clock counts the seconds of attempts that were killed, so a resumed profile is not undercounted;
stage seconds from runs side by side in one folder all reach the timings file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from pivotgym.experiment.clock import StageClock

KILLED_ATTEMPT = """
import sys, time
from pathlib import Path
from pivotgym.experiment.clock import StageClock
with StageClock(Path(sys.argv[1]), every=0.1):
    print("started", flush=True)
    time.sleep(60)
"""


def test_a_killed_attempt_keeps_its_seconds(tmp_path):
    path = tmp_path / "profiles.seconds.json"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_ATTEMPT, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)  # no finally, no atexit: only the periodic writes survive
    proc.wait(timeout=30)
    killed = json.loads(path.read_text())["seconds"]
    assert len(killed) == 1 and 0.8 <= killed[0] <= 5.0

    with StageClock(path, every=0.1) as clock:
        time.sleep(0.3)
    assert clock.earlier[0] == killed[0] and len(clock.earlier) == 2
    assert clock.total == sum(json.loads(path.read_text())["seconds"]) >= killed[0] + 0.3


def test_a_torn_record_costs_its_seconds_not_the_run(tmp_path):
    path = tmp_path / "clock.json"
    path.write_text('{"seconds": [1.5, ')
    with StageClock(path) as clock:
        pass
    assert clock.earlier == [clock.total] and json.loads(path.read_text())["seconds"] == clock.earlier


def _add_many(path: str, stage: str, times: int) -> None:
    from pivotgym.experiment.pipeline import _add_seconds

    for _ in range(times):
        _add_seconds(Path(path), stage, 1.0)


def test_stage_seconds_added_by_processes_side_by_side_are_all_kept(tmp_path):
    """Two runs of other seeds in one folder add to one timings file: no addition is lost."""
    import multiprocessing

    path = tmp_path / "timings.json"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_add_many, args=(str(path), stage, 40)) for stage in ("pivot", "pivot", "sft")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    assert json.loads(path.read_text()) == {"pivot": 80.0, "sft": 40.0}
