"""Run by ``test_vllm_sync.py`` in an interpreter that has vLLM: an RL trainer with ``sampler: vllm`` on the
bundled SmolLM2-135M (fp32), greedy outputs of the colocated engine and of the live policy before and after
one optimiser step, written as JSON to ``argv[1]`` for the test to compare.

``python vllm_sync_worker.py OUT.json RUN_DIR``
"""

from __future__ import annotations

import gc
import json
import sys
import time
import weakref
from pathlib import Path

from pivotgym.sampling.base import SamplerError, SamplingParams
from pivotgym.sampling.hf import HFSampler
from pivotgym.train.config import RLConfig
from pivotgym.train.rl import RLTrainer, group_samples

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]
#: the completion the update rewards (the engine's own greedy answer is the penalised one)
TARGET = " Purple elephants dance on the moon every Tuesday."


def resident_bytes() -> int:
    """This process's resident memory (Linux), where the in-process engine's KV cache and weights live."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def greedy(sampler, prompt_ids):
    completion = sampler.sample([prompt_ids], n=1, params=GREEDY)[0][0]
    return {"ids": completion.token_ids, "logprobs": completion.logprobs}


def main(out: Path, run_dir: Path) -> None:
    started = time.perf_counter()
    config = RLConfig(
        model="smollm2-135m",
        output_dir=str(run_dir),
        steps=1,
        optimizer="adamw",
        learning_rate=1e-3,
        max_grad_norm=None,
        mixed_precision="no",
        progress=False,
        report_to=["none"],
        sampler="vllm",
        sampler_options={"dtype": "float32", "max_model_len": 512},
    )
    trainer = RLTrainer(config)
    engine = trainer.sampler  # built from the model's folder, then pushed the policy's weights
    built = time.perf_counter()
    live = HFSampler(trainer.unwrapped_model, trainer.tokenizer)
    prompt = engine.encode(PROMPT)
    before = {"engine": greedy(engine, prompt), "policy": greedy(live, prompt)}
    target = [int(t) for t in trainer.tokenizer(TARGET, add_special_tokens=False)["input_ids"]]
    samples = group_samples(
        prompt,
        [before["engine"]["ids"], target],
        [0.0, 1.0],
        logprobs=[before["engine"]["logprobs"], None],  # only the engine's sample has recorded logprobs
    )
    stats = trainer.policy_update(samples)
    synced = time.perf_counter()
    after = {"engine": greedy(trainer.sampler, prompt), "policy": greedy(live, prompt)}
    done = time.perf_counter()
    described = trainer.sampler.describe()
    # close(): the in-process engine's memory comes back, the closed engine refuses to sample, and the trainer
    # builds a new engine that samples the current policy
    open_rss = resident_bytes()
    trainer.close()
    gc.collect()
    closed_rss = resident_bytes()
    # imported only now: the trainer's engine must be the first to import vLLM, for the check below
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO

    reload_state_left = len(LAYERWISE_INFO)  # vLLM's per-layer reload state, forgotten by close()
    try:
        engine.sample([prompt], n=1, params=GREEDY)
        refused = ""
    except SamplerError as error:
        refused = str(error)
    reopened = greedy(trainer.sampler, prompt)
    reopened_rss = resident_bytes()
    weights_version = trainer.weights_version
    # closed and dropped, the trainer is freed: nothing of vLLM's keeps it (its first import once kept the
    # frames, and so the locals, of whoever triggered it: here the trainer building its engine)
    trainer.close()
    kept = weakref.ref(trainer)
    del trainer
    gc.collect()
    out.write_text(
        json.dumps(
            {
                "before": before,
                "after": after,
                "stats": stats,
                "weights_version": weights_version,
                "engine": described,
                "close": {
                    "rss_open": open_rss,
                    "rss_closed": closed_rss,
                    "rss_reopened": reopened_rss,
                    "refused": refused,
                    "reopened": reopened,
                    "trainer_freed": kept() is None,
                    "reload_state_left": reload_state_left,
                },
                "seconds": {
                    "build_and_first_push": built - started,
                    "update": synced - built,
                    "push_and_sample": done - synced,
                },
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
