"""Worker for the kill-and-resume test: a short pivot run on arith with the tiny model.

``python resume_worker.py DATA_DIR OUT_DIR [KILL_AFTER_STEP]``: with KILL_AFTER_STEP the process SIGKILLs
itself right after that step (no clean shutdown), as a crash or a pre-empted job would.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(data: str, out: str, kill_after: int | None) -> None:
    from train_testlib import register_test_verifier

    from pivotgym.sampling.testing import tiny_llama
    from pivotgym.train import PivotConfig, PivotTrainer

    register_test_verifier()
    model, tokenizer = tiny_llama(seed=3)
    config = PivotConfig(
        output_dir=out,
        pivots=f"{data}/pivots.jsonl",
        trajectories=f"{data}/expert.jsonl",
        steps=4,
        checkpoint_every=2,
        eval_every=2,
        group_size=4,
        pivots_per_step=2,
        max_new_tokens=6,
        verifier="test/even-length",
        eval_pivots=2,
        eval_samples=2,
        learning_rate=1e-3,
        lr_schedule="linear",
        warmup_steps=1,
        report_to=["none"],
        progress=False,
        seed=11,
    )

    def crash(trainer, row):
        if kill_after is not None and trainer.step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    PivotTrainer(config, model=model, tokenizer=tokenizer).fit(callbacks=[crash])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
