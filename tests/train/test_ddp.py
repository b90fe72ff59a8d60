"""A 2-process gloo DDP run on CPU makes the same update as 1 process on the same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("ddp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@pytest.mark.timeout(360)
def test_two_process_ddp_equals_one_process(tmp_path):
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    _run([sys.executable, str(WORKER), str(one), "shared"], tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={_free_port()}",
            str(WORKER),
            str(two),
            "shared",
        ],
        tmp_path,
    )
    a, b = torch.load(one), torch.load(two)
    assert (a["world"], b["world"]) == (1, 2)
    # the zero-variance group is dropped on both; the token count is global
    assert a["tokens"] == b["tokens"] == 23
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
    moved = max((a["state"][k] - b["state"][k]).abs().max().item() for k in a["state"])
    from train_testlib import make_tiny_llama

    init = make_tiny_llama().state_dict()
    change = max((a["state"][k] - init[k]).abs().max().item() for k in a["state"])
    assert change > 1e-2  # the update is real (plain SGD, lr 1: proportional to the gradient)
    assert moved < 1e-5 * max(1.0, change)
