"""Per-token log-probabilities of given completions under a causal LM: the one place they are computed.

Samplers, trainers and the likelihood floors all score here:

* :func:`token_logprobs` - a batch of (prompt, completion) pairs at once, what
  :class:`~pivotgym.sampling.hf.HFSampler` scores with. Prompts are left-padded and completions right-padded
  so every completion starts at the same column; the model then only has to produce logits for the
  completion columns (``logits_to_keep``), which keeps memory at ``batch x completion_len x vocab`` instead
  of ``batch x total_len x vocab``. Positions are computed from the attention mask, so padding never shifts a
  sequence's rotary positions and the numbers match unpadded scoring.
* :func:`completion_logprobs` - the G completions sampled from one state, which share its prompt (the policy
  gradient trainers). With ``shared_prefix=True`` the prompt runs once, its key/value cache is repeated G
  times (``repeat_interleave`` is differentiable, so the backward pass through the prompt also runs once) and
  only the completion tokens run on top; with ``shared_prefix=False`` each sequence is ``prompt +
  completion`` run on its own. Both give the same log-probabilities and gradients (a test checks it); the
  shared form does ``P + G*L`` token positions instead of ``G*(P + L)``.
* :func:`sequence_logprobs` - whole sequences scored on a loss mask (SFT).

All of them run under the caller's grad mode: inside ``torch.no_grad()`` to score, with grad to train.
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


def pad_right(
    seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into ``[B, T]`` ids and a 0/1 mask (right padding keeps positions intact)."""
    width = max((len(s) for s in seqs), default=0)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)


def _gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target], computed in fp32 for stability whatever the model dtype."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    completions: Sequence[Sequence[int]],
    *,
    shared_prefix: bool = True,
    pad_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities ``[G, L]`` of each completion token given the prompt, and the token mask ``[G, L]``.

    ``model`` is any causal LM returning ``.logits`` and accepting ``past_key_values`` (HF transformers,
    possibly wrapped by DDP/FSDP/peft). Positions past a completion's end are masked (logprob 0).
    """
    if len(prompt_ids) == 0:
        raise ValueError("the prompt must have at least one token")
    device = _device_of(model)
    comp_ids, comp_mask = pad_right(completions, pad_id, device)
    g, width = comp_ids.shape
    if width == 0:
        return torch.zeros((g, 0), device=device), comp_mask
    prompt = torch.as_tensor(list(prompt_ids), dtype=torch.long, device=device)[None, :]
    p = prompt.shape[1]
    if shared_prefix:
        out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)  # only the last position's logits
        cache = out.past_key_values
        first_logits = out.logits[:, -1:, :].expand(g, 1, -1)  # predicts completion token 0
        cache.batch_repeat_interleave(g)
        attention = torch.cat([torch.ones((g, p), dtype=torch.long, device=device), comp_mask], dim=1)
        if width > 1:
            rest = model(
                input_ids=comp_ids[:, :-1], attention_mask=attention[:, :-1], past_key_values=cache, use_cache=True
            ).logits  # position j predicts completion token j + 1
            logits = torch.cat([first_logits, rest], dim=1)
        else:
            logits = first_logits
    else:
        full_ids = torch.cat([prompt.expand(g, p), comp_ids], dim=1)
        attention = torch.cat([torch.ones((g, p), dtype=torch.long, device=device), comp_mask], dim=1)
        # the last `width` positions predict the completion tokens; no logits for the rest of the prompt
        logits = model(
            input_ids=full_ids[:, :-1], attention_mask=attention[:, :-1], use_cache=False, logits_to_keep=width
        ).logits
    logprobs = _gather_logprobs(logits, comp_ids) * comp_mask
    return logprobs, comp_mask


def sequence_logprobs(
    model: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    pad_id: int = 0,
    target_masks: Sequence[Sequence[int]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities ``[B, T-1]`` of tokens 1..T-1 of each sequence given the tokens before (SFT),
    with the mask of the target positions they cover.

    ``target_masks``: per sequence, 0/1 over its target positions 1..T-1 (SFT's loss mask). When given, the
    model produces logits only at the positions some sequence's mask selects, and the mask returned is the
    real targets among those. A multi-turn conversation carries the loss on a few short answers, so this
    skips most of the language-model head and of the fp32 log-softmax over the vocabulary - the largest
    tensors of a step - without changing the loss or its gradient (a test compares both with full logits).
    """
    device = _device_of(model)
    ids, mask = pad_right(sequences, pad_id, device)
    targets, target_mask = ids[:, 1:], mask[:, 1:]
    if target_masks is None:
        logits = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=False).logits
        return _gather_logprobs(logits, targets) * target_mask, target_mask
    wanted = torch.zeros_like(target_mask)
    for row, selected in enumerate(target_masks):
        chosen = torch.as_tensor(list(selected)[: wanted.shape[1]], dtype=wanted.dtype, device=device)
        wanted[row, : len(chosen)] = chosen
    wanted *= target_mask
    columns = wanted.any(dim=0).nonzero().squeeze(-1)
    if columns.numel() == 0:  # nothing to learn: still one column, so the backward pass has a graph
        columns = torch.zeros(1, dtype=torch.long, device=device)
    logits = model(
        input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=False, logits_to_keep=columns
    ).logits  # [B, len(columns), V]
    logprobs = torch.zeros(targets.shape, dtype=torch.float32, device=device)
    logprobs = logprobs.index_copy(1, columns, _gather_logprobs(logits, targets[:, columns]))
    return logprobs * wanted, wanted


def _device_of(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


__all__ = [
    "completion_logprobs",
    "pad_prompt_completion",
    "pad_right",
    "positions_from_mask",
    "sequence_logprobs",
    "token_logprobs",
]
