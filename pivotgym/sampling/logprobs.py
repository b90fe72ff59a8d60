"""Per-token log-probabilities of given completions under a model, batched (the trainers' workhorse).

Layout: prompts are left-padded and completions right-padded so every completion starts at the same
column; the model then only has to produce logits for the completion columns (``logits_to_keep``), which
keeps memory at ``batch x completion_len x vocab`` instead of ``batch x total_len x vocab``. Positions are
computed from the attention mask, so padding never shifts a sequence's rotary positions and the numbers
match unpadded scoring and :class:`~pivotgym.sampling.hf.HFSampler`'s own logprobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_prompt_completion(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(input_ids, attention_mask, completion_mask, prompt_width)`` for a batch of (prompt, completion).

    ``input_ids[:, :prompt_width]`` holds the left-padded prompts, ``input_ids[:, prompt_width:]`` the
    right-padded completions; ``completion_mask`` marks the real completion tokens (``[B, max_completion]``).
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token (the model must condition on something)")
    width = max(len(p) for p in prompt_ids)
    tail = max((len(c) for c in completion_ids), default=0)
    batch = len(prompt_ids)
    input_ids = torch.full((batch, width + tail), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width + tail), dtype=torch.long)
    completion_mask = torch.zeros((batch, tail), dtype=torch.bool)
    for row, (prompt, completion) in enumerate(zip(prompt_ids, completion_ids)):
        input_ids[row, width - len(prompt) : width] = torch.as_tensor(list(prompt), dtype=torch.long)
        attention[row, width - len(prompt) : width] = 1
        if completion:
            input_ids[row, width : width + len(completion)] = torch.as_tensor(list(completion), dtype=torch.long)
            attention[row, width : width + len(completion)] = 1
            completion_mask[row, : len(completion)] = True
    if device is not None:
        input_ids, attention, completion_mask = input_ids.to(device), attention.to(device), completion_mask.to(device)
    return input_ids, attention, completion_mask, width


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Rotary position ids that ignore left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int = 0,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each completion token given its prompt and the completion tokens before it.

    Returns ``(logprobs, mask)``, both ``[batch, max_completion_len]``; padded positions hold 0 and
    ``mask`` False. Runs under the caller's grad mode: call it inside ``torch.no_grad()`` to score, or with
    grad enabled to train. ``temperature`` divides the logits first (1.0 = the model's own distribution).
    """
    device = next(model.parameters()).device
    input_ids, attention, mask, width = pad_prompt_completion(prompt_ids, completion_ids, pad_id, device)
    tail = mask.shape[1]
    if tail == 0:
        return torch.zeros(mask.shape, device=device), mask
    # logits at columns width-1 .. width+tail-2 predict the completion tokens; keep only those (+1 unused)
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions_from_mask(attention),
        use_cache=False,
        logits_to_keep=tail + 1,
    )
    logits = out.logits[:, :-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, width:]
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logprobs = picked - torch.logsumexp(logits, dim=-1)
    return logprobs.masked_fill(~mask, 0.0), mask
