"""Worker for the DDP test: one policy update on this process's share of a fixed global batch.

Run under ``torchrun --nproc_per_node=N`` (gloo on CPU) or as a plain process (N=1); writes the updated
weights to ``OUT`` from rank 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from train_testlib import make_tiny_llama

from pivotgym.train.config import RLConfig
from pivotgym.train.loop import shard
from pivotgym.train.rl import RLTrainer, group_samples

GROUPS = [  # (prompt, completions, rewards): uneven lengths, one zero-variance group
    ([5, 6, 7, 8, 9, 10], [[30, 31, 32], [33], [34, 35], [36, 37, 38, 39]], [1.0, 0.0, 0.0, 1.0]),
    ([20, 21, 22], [[40, 41], [42, 43, 44]], [0.0, 1.0]),
    ([50, 51], [[60, 61], [62]], [1.0, 1.0]),
    ([70, 71, 72, 73], [[80], [81, 82, 83, 84, 85], [86, 87]], [0.0, 0.5, 1.0]),
]


def main(out: str, shared: str) -> None:
    config = RLConfig(
        output_dir=str(Path(out).parent / "run"),
        optimizer="sgd",
        learning_rate=1.0,
        max_grad_norm=None,
        micro_batch_size=2,
        shared_prefix=shared == "shared",
        progress=False,
        report_to=["none"],
    )
    trainer = RLTrainer(config, model=make_tiny_llama())
    mine = shard(GROUPS, trainer.rank, trainer.world)
    for _ in range(2):
        samples = [s for prompt, comps, rewards in mine for s in group_samples(prompt, comps, rewards, "std")]
        stats = trainer.policy_update(samples)
    if trainer.accelerator.is_main_process:
        torch.save(
            {
                "state": {k: v.detach().cpu() for k, v in trainer.unwrapped_model.state_dict().items()},
                "world": trainer.world,
                "tokens": stats["tokens_in_loss"],
                "loss": stats["loss"],
            },
            out,
        )
    trainer.accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():  # gloo's threads are joined here, not torn down at exit (a CI run
        torch.distributed.destroy_process_group()  # aborted a rank with "terminate called without an active exception")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
