"""Run by the interpreter of .venv-verl (``make verl``), never imported by pivotgym's tests: verl 0.9.1's own
reward path over a real batch, with pivotgym's ``compute_score`` loaded the way verl's docs configure it.

    echo '{"parquet", "model", "score_path", "responses": [[row, text], ...]}' | python verl_reward_check.py

1. verl's trainer config is composed by Hydra from verl's own ``ppo_trainer.yaml``, with
   ``reward.custom_reward_function.path/name`` pointing at ``pivotgym/integrations/verl.py:compute_score``;
2. ``verl.trainer.ppo.reward.load_reward_manager`` loads that function and builds the configured reward manager
   (verl's default, ``naive``, of its reward loop);
3. the batch is a ``DataProto`` built like a rollout's: the parquet rows' prompts through the model's chat template,
   left-padded, and each response's tokens right-padded, with ``data_source``, ``reward_model`` and
   ``extra_info`` from the parquet as non-tensor fields;
4. the manager scores every sample (``run_single``), and ``assemble_rm_scores`` places the scores in the
   ``rm_scores`` tensor as the trainer does.

Printed: one JSON object with each sample's score, its extra info and the tensor's row sums.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd
import torch
import verl
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from transformers import AutoTokenizer
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager


def batch(frame: pd.DataFrame, tokenizer, responses: list[list]) -> DataProto:
    prompts, answers, rows = [], [], []
    for index, text in responses:
        row = frame.iloc[int(index)]
        messages = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))  # a BatchEncoding in newer versions
        answers.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        rows.append(row)
    width_p, width_r = max(map(len, prompts)), max(map(len, answers))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + list(p) for p in prompts])
    response_ids = torch.tensor([list(r) + [pad] * (width_r - len(r)) for r in answers])
    mask = torch.tensor(
        [
            [0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
            for p, r in zip(prompts, answers)
        ]
    )
    tensors = TensorDict(
        {
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": mask,
        },
        batch_size=[len(rows)],
    )
    non_tensors = {
        "data_source": np.array([r["data_source"] for r in rows], dtype=object),
        "reward_model": np.array([dict(r["reward_model"]) for r in rows], dtype=object),
        "extra_info": np.array([dict(r["extra_info"]) for r in rows], dtype=object),
    }
    return DataProto(batch=tensors, non_tensor_batch=non_tensors)


def main() -> None:
    job = json.load(sys.stdin)
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(
            config_name="ppo_trainer",
            overrides=[
                f"reward.custom_reward_function.path={job['score_path']}",
                "reward.custom_reward_function.name=compute_score",
            ],
        )
    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    manager = load_reward_manager(config, tokenizer)
    data = batch(pd.read_parquet(job["parquet"]), tokenizer, job["responses"])

    async def score_all() -> list[dict]:
        return [await manager.run_single(data[i : i + 1]) for i in range(len(data))]

    results = manager.loop.run_until_complete(score_all())  # the loop the manager was built on, as verl's worker
    scores = [float(r["reward_score"]) for r in results]
    rm_scores = manager.assemble_rm_scores(data, scores)
    extra = [
        {k: (float(v) if isinstance(v, (int, float)) else str(v)) for k, v in r["reward_extra_info"].items()}
        for r in results
    ]
    print(
        json.dumps(
            {
                "manager": type(manager).__name__,
                "scores": scores,
                "extra": extra,
                "rm_scores_row_sums": rm_scores.sum(dim=1).tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
