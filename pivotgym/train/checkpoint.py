"""Checkpoints: model, optimizer, scheduler, RNG states (through accelerate), plus the trainer's own state
(step, data position, counters, config) as JSON.

A checkpoint is written into ``checkpoints/step-NNNNNN.tmp`` and renamed to ``step-NNNNNN`` only once
complete, so a run killed while saving resumes from the previous complete checkpoint. The newest complete
one is found by :func:`latest_checkpoint`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

TRAINER_STATE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_OPTIMIZER_FILE = re.compile(r"^optimizer(_\d+)?\.(bin|safetensors)$")


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest first."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and (p / TRAINER_STATE).is_file()
    ]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    ckpts = list_checkpoints(output_dir)
    return ckpts[-1] if ckpts else None


def _optimizer_files(path: Path) -> list[Path]:
    """accelerate's optimizer state files in a checkpoint (``optimizer.bin``, ``optimizer_1.bin``, ...)."""
    return [p for p in path.iterdir() if p.is_file() and _OPTIMIZER_FILE.match(p.name)]


def save_checkpoint(
    accelerator: Any,
    output_dir: str | Path,
    step: int,
    trainer_state: dict[str, Any],
    keep: int = 2,
    keep_optimizer: int = 1,
) -> Path:
    """Save everything needed to resume after ``step`` optimisation steps; every process must call it.

    The newest ``keep`` checkpoints are kept; only the newest ``keep_optimizer`` of them keep their optimizer
    state (for Adam twice the model's size), so older ones hold weights (loadable with ``--model``) but
    cannot be resumed from."""
    root = checkpoint_root(output_dir)
    final = root / f"step-{step:06d}"
    tmp = root / f"step-{step:06d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp), safe_serialization=False)
    if accelerator.is_main_process:
        (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2, default=str))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in list_checkpoints(output_dir)[: -max(1, keep)]:
            shutil.rmtree(old, ignore_errors=True)
        for old in list_checkpoints(output_dir)[: -max(1, keep_optimizer)]:
            for file in _optimizer_files(old):
                file.unlink()
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Any, path: str | Path) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG states from ``path``; return the trainer state."""
    path = Path(path)
    state_file = path / TRAINER_STATE
    if not state_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete pivotgym checkpoint (no {TRAINER_STATE})")
    if not _optimizer_files(path):
        raise FileNotFoundError(
            f"{path} holds no optimizer state (only the newest `keep_optimizer_state` "
            f"checkpoints keep it), so it cannot be resumed from; resume from the newest "
            f"checkpoint (resume: auto), or load its weights with `--model {path}`"
        )
    accelerator.load_state(str(path))
    return json.loads(state_file.read_text())


__all__ = ["latest_checkpoint", "list_checkpoints", "load_checkpoint", "save_checkpoint"]
