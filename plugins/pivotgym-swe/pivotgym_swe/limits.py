"""What every judged test run gets, the test judge's and the differential harness's alike: the sandbox limits
and the environment variables of the runner process."""

from __future__ import annotations

from pivotgym.sandbox import Limits

__all__ = ["JUDGE_LIMITS", "RUNNER_ENV"]

JUDGE_LIMITS = Limits(
    wall_seconds=120,
    cpu_seconds=120,
    memory_bytes=4 << 30,
    max_processes=64,
    file_size_bytes=64 << 20,
    output_bytes=8 << 20,  # the outcome channel is the process's stdout
    total_memory_bytes=4 << 30,
    disk_bytes=512 << 20,
)
RUNNER_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "", "PY_COLORS": "0"}
