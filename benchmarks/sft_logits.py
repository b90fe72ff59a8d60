"""SFT's forward and backward with logits only at the loss positions against logits at every position.

    python benchmarks/sft_logits.py [--trajectories 4] [--repeats 2] [--json]

An SFT example is one whole expert conversation whose loss sits on the assistant's short answers (a gripper
plan: ~1,000 context tokens per answer of ~8). :func:`pivotgym.sampling.logprobs.sequence_logprobs` with
``target_masks`` asks the model for logits at those positions only; without it the language-model head and an
fp32 log-softmax over the 49k-token vocabulary run at every position. Both forms run on the same examples
(one conversation per forward, as SFT's default micro-batch), alternating, on the bundled SmolLM2-135M; the
benchmark prints the time of each, their ratio, and the largest differences of loss and gradient between
them (it fails if they differ beyond float rounding).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from _smoke import parse_args, tiny_model

from pivotgym.registry import make
from pivotgym.sampling.hf import HFSampler
from pivotgym.sampling.logprobs import sequence_logprobs
from pivotgym.train.losses import nll_sum
from pivotgym.train.sft import SFTExample, build_examples


def _step(model: torch.nn.Module, examples: list[SFTExample], kept: bool) -> tuple[float, list[torch.Tensor]]:
    """One accumulation of every example's summed NLL; returns the loss and the gradients."""
    model.zero_grad(set_to_none=True)
    total = 0.0
    for e in examples:
        masks = [e.loss_mask[1:]]
        logp, mask = sequence_logprobs(model, [e.input_ids], 0, masks if kept else None)
        if not kept:
            mask = torch.tensor(masks, dtype=logp.dtype)[:, : logp.shape[1]]
        loss = nll_sum(logp, mask)
        loss.backward()
        total += float(loss.detach())
    return total, [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/gripper-gen-v0")
    parser.add_argument("--trajectories", type=int, default=4, help="the first N successful train expert plans")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes of each form (alternating)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, model=tiny_model, env="planning/blocks-v0", trajectories=1, repeats=1)

    env = make(args.env)
    plans = [t for t in env.expert_trajectories("train") if t.reward > 0][: args.trajectories]
    sampler = HFSampler(args.model)
    model = sampler.model
    model.train()
    examples = [e for t in plans for e in build_examples(t, sampler.tokenizer, env, max_length=8192)]
    seconds = {"full": 0.0, "kept": 0.0}
    results = {}
    for _ in range(args.repeats):
        for form in ("full", "kept"):
            start = time.perf_counter()
            results[form] = _step(model, examples, kept=form == "kept")
            seconds[form] += time.perf_counter() - start
    (full_loss, full_grads), (kept_loss, kept_grads) = results["full"], results["kept"]
    grad_gap = max(float((a - b).abs().max()) for a, b in zip(full_grads, kept_grads))
    grad_scale = max(float(a.abs().max()) for a in full_grads)
    result = {
        "model": args.model,
        "examples": len(examples),
        "tokens": sum(len(e.input_ids) for e in examples),
        "loss_tokens": sum(e.n_loss_tokens for e in examples),
        "full_s": round(seconds["full"] / args.repeats, 2),
        "kept_s": round(seconds["kept"] / args.repeats, 2),
        "speedup": round(seconds["full"] / seconds["kept"], 3),
        "loss_gap": abs(full_loss - kept_loss),
        "grad_gap": grad_gap,
        "grad_scale": grad_scale,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.env}: {result['examples']} expert conversations, {result['tokens']} tokens, "
            f"{result['loss_tokens']} in the loss; {args.model}, forward + backward, mean of {args.repeats}"
        )
        print(f"  logits at every position      {result['full_s']:8.2f} s")
        print(f"  logits at the loss positions  {result['kept_s']:8.2f} s   ({result['speedup']:.2f}x faster)")
        gaps = f"loss {result['loss_gap']:.2e}, gradient {grad_gap:.2e} (largest gradient {grad_scale:.2e})"
        print(f"  largest gap: {gaps}")
    if result["loss_gap"] > 1e-4 * max(1.0, abs(full_loss)) or grad_gap > 1e-4 * grad_scale:
        raise SystemExit("the two forms disagree beyond float rounding")


if __name__ == "__main__":
    main()
