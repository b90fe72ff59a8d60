"""`pivotgym expert planning/... --out F` writes standard trajectories."""

import json
import os
import subprocess
import sys
from pathlib import Path


def test_expert_command_writes_trajectories(tmp_path: Path, registry):
    out = tmp_path / "blocks.jsonl"
    exe = Path(sys.executable).with_name("pivotgym")
    proc = subprocess.run(
        [str(exe), "expert", "planning/blocks-v0", "--split", "train", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 3
    for row in rows:
        assert {"id", "env_id", "task_id", "messages", "reward", "source", "metadata"} <= set(row)
        assert row["env_id"] == "planning/blocks-v0" and row["reward"] == 1.0
        assert row["task_id"].startswith("blocks/")
        roles = [m["role"] for m in row["messages"]]
        assert roles[:2] == ["system", "user"] and roles[2] == "assistant"
