"""What a τ² prompt costs on this machine: prefill and training (forward + backward) tokens per second at the
lengths τ² has, against the same model on a short prompt measured in the same run.

τ²'s system prompt is the domain policy plus its tool schemas (retail: 3.4k tokens with SmolLM2's tokenizer) and
a whole conversation is 5-9k tokens, so attention, quadratic in the length, takes a share of the work that it
does not take on the short prompts of the other quickstarts. Printed, for the bundled SmolLM2-135M:

* prefill of the first expert state's prompt (the opening) and of the baseline (its first ``--short`` tokens):
  tokens/s of each and their ratio;
* one SFT forward + backward over the whole first expert conversation (the loss on its assistant turns, as the
  SFT trainer computes it) and over the baseline: tokens/s of each and their ratio;
* from those rates, what one profiled state (prefill of the opening) and one SFT step (one conversation) cost.

    .venv/bin/python benchmarks/tau2_rates.py [--domain retail] [--short 512] [--repeats 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from _smoke import parse_args, tiny_model

import pivotgym
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.logprobs import sequence_logprobs
from pivotgym.train.losses import nll_sum
from pivotgym.train.sft import build_examples


def _prefill_s(model: torch.nn.Module, ids: list[int], repeats: int) -> float:
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(repeats):
            model(input_ids=torch.tensor([ids]), logits_to_keep=1)
    return (time.perf_counter() - start) / repeats


def _train_s(model: torch.nn.Module, ids: list[int], mask: list[int], repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        logp, target = sequence_logprobs(model, [ids], 0, [mask[1:]])
        nll_sum(logp, target).backward()
    return (time.perf_counter() - start) / repeats


def measure(model_name: str, domain: str, short: int, repeats: int) -> dict[str, object]:
    env = pivotgym.make(f"tau2/{domain}-v0")
    try:
        trajectory = next(t for t in env.expert_trajectories("train") if t.reward > 0)
        sampler = HFSampler(model_name)
        tokenizer, model = sampler.tokenizer, sampler.model
        window = int(getattr(model.config, "max_position_embeddings", 8192))
        (example,) = build_examples(trajectory, tokenizer, env, max_length=window)
        messages = env.prompt_messages(trajectory.messages)
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        opening = tokenizer.apply_chat_template(
            messages[:first], add_generation_prompt=True, tokenize=True, return_dict=False
        )
    finally:
        env.close()
    short = min(short, len(opening) // 2)
    model.eval()
    _prefill_s(model, opening[:short], 1)  # warm the kernels up
    prefill = {"opening": _prefill_s(model, opening, repeats), "short": _prefill_s(model, opening[:short], repeats)}
    model.train()
    short_mask = example.loss_mask[:short]
    short_mask = short_mask if sum(short_mask[1:]) else [0] * (short - 1) + [1]  # the baseline needs a target
    train = {
        "conversation": _train_s(model, example.input_ids, example.loss_mask, repeats),
        "short": _train_s(model, example.input_ids[:short], short_mask, repeats),
    }
    rates = {
        "prefill_opening_tok_s": len(opening) / prefill["opening"],
        "prefill_short_tok_s": short / prefill["short"],
        "train_conversation_tok_s": len(example.input_ids) / train["conversation"],
        "train_short_tok_s": short / train["short"],
    }
    return {
        "model": model_name,
        "domain": domain,
        "threads": torch.get_num_threads(),
        "opening_tokens": len(opening),
        "conversation_tokens": len(example.input_ids),
        "short_tokens": short,
        **{key: round(value, 1) for key, value in rates.items()},
        "prefill_ratio_opening_vs_short": round(rates["prefill_opening_tok_s"] / rates["prefill_short_tok_s"], 3),
        "train_ratio_conversation_vs_short": round(rates["train_conversation_tok_s"] / rates["train_short_tok_s"], 3),
        "seconds_prefill_opening": round(prefill["opening"], 2),
        "seconds_sft_one_conversation": round(train["conversation"], 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--domain", default="retail", choices=("airline", "retail"))
    parser.add_argument("--short", type=int, default=512, help="tokens of the baseline prompt")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, argv, model=tiny_model, repeats=1)
    result = measure(args.model, args.domain, args.short, args.repeats)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")
    print(
        f"ratio: a {result['opening_tokens']}-token opening prefills at {result['prefill_ratio_opening_vs_short']}x "
        f"the tokens/s of a {result['short_tokens']}-token prompt; a {result['conversation_tokens']}-token "
        f"conversation trains at {result['train_ratio_conversation_vs_short']}x the tokens/s of the short one"
    )


if __name__ == "__main__":
    main()
