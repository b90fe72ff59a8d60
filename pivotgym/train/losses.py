"""Advantages and losses of the trainers, as pure tensor functions (easy to check by hand).

The policy-gradient loss of one optimisation step is token-level and normalised over the whole global
batch::

    L = (1 / N) * sum_{samples i, tokens t} [ -min(r_it * A_i, clip(r_it, 1 - c_lo, 1 + c_hi) * A_i)
                                              + beta * KL3(pi || pi_ref)_it ]

where ``N`` counts the completion tokens of every *informative* group in the global batch (all
micro-batches and all processes). Groups whose rewards have zero variance carry no signal: they are left
out before the forward pass, so they add neither gradient nor tokens to ``N`` (they never dilute the rest).
The functions here return *sums*; the caller divides by ``N`` once it is known globally.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from pivotgym.train.config import ADVANTAGE_MODES


def group_advantages(rewards: Sequence[float] | torch.Tensor, mode: str = "std", eps: float = 1e-6) -> torch.Tensor:
    """Group-relative advantages of the G rewards of one state.

    * ``std`` (GRPO): ``(r - mean) / (std + eps)`` with the unbiased (n-1) standard deviation;
    * ``no_std`` (Dr. GRPO): ``r - mean``, no scaling (no bias towards easy or hard groups);
    * ``loo`` (RLOO): ``r_i - mean_{j != i} r_j``, i.e. ``G / (G - 1) * (r - mean)``;
    * ``rloo_std`` (the estimator of NVIDIA's NeMo-RL recipes): the leave-one-out baseline divided by the
      leave-one-out standard deviation, ``(r_i - mean_{j != i} r_j) / (std_{j != i} r_j + eps)`` with the unbiased
      SD of the G - 1 other rewards; where that SD is 0 (the others all agree, or G = 2) the sample's advantage
      is left unnormalised, ``r_i - mean_{j != i} r_j``, rather than blown up by ``1 / eps``.

    A group with zero variance gets all-zero advantages (see :func:`is_informative`).
    """
    r = torch.as_tensor(rewards, dtype=torch.float64).flatten()
    g = r.numel()
    if g < 2:
        raise ValueError(f"group-relative advantages need at least 2 samples per group, got {g}")
    centred = r - r.mean()
    if not is_informative(r):
        return torch.zeros_like(r)
    if mode == "std":
        return centred / (r.std(unbiased=True) + eps)
    if mode == "no_std":
        return centred
    if mode == "loo":
        return centred * g / (g - 1)
    if mode == "rloo_std":
        return _leave_one_out_normalised(r, eps)
    raise ValueError(f"unknown advantage mode {mode!r}; choose one of {ADVANTAGE_MODES}")


def _leave_one_out_normalised(r: torch.Tensor, eps: float) -> torch.Tensor:
    """``(r_i - b_i) / (s_i + eps)`` where ``b_i`` and ``s_i`` are the mean and unbiased SD of the other rewards,
    and ``r_i - b_i`` where ``s_i`` is 0 or undefined (fewer than two others)."""
    g = r.numel()
    others_sum, others_sq = r.sum() - r, (r * r).sum() - r * r
    baseline = others_sum / (g - 1)
    advantage = r - baseline
    if g < 3:
        return advantage
    var = ((others_sq - (g - 1) * baseline * baseline) / (g - 2)).clamp_min(0.0)
    sd = var.sqrt()
    spread = sd > 1e-12
    return torch.where(spread, advantage / (sd + eps), advantage)


def is_informative(rewards: Sequence[float] | torch.Tensor, tol: float = 1e-12) -> bool:
    """True when the rewards of a group differ (variance > 0), i.e. the group carries a learning signal."""
    r = torch.as_tensor(rewards, dtype=torch.float64).flatten()
    return bool(r.numel() > 1 and (r.max() - r.min()).abs() > tol)


def placebo_shuffle(advantages: Sequence[float] | torch.Tensor, rng: random.Random) -> torch.Tensor:
    """The placebo ablation of one group: its advantages in a uniformly random order drawn by ``rng``.

    The permutation is drawn without looking at the rewards, so each sample's advantage is independent of
    its own reward and its expectation is the group's mean advantage, which is 0 in every mode (the
    advantages are centred). The expected policy gradient ``sum_i E[A_pi(i)] grad log p_i`` is therefore 0,
    while the group keeps its multiset of advantages (the same step size, the same noise): a placebo run
    shows what updating at all does with the given optimiser settings.
    """
    a = torch.as_tensor(advantages, dtype=torch.float64).flatten()
    order = list(range(a.numel()))
    rng.shuffle(order)
    return a[torch.tensor(order, dtype=torch.long)]


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over unmasked tokens of the negated clipped surrogate, and the number of clipped tokens.

    ``logprobs``/``old_logprobs``/``mask`` are ``[B, T]``; ``advantages`` is ``[B]`` (one per sequence) or
    ``[B, T]``. The ratio is clipped asymmetrically to ``[1 - clip_low, 1 + clip_high]``.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    advantages = advantages.to(logprobs.dtype)
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    n_clipped = ((clipped < unclipped).to(mask.dtype) * mask).sum().detach()
    return (per_token * mask).sum(), n_clipped


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over unmasked tokens of the k3 estimator of KL(pi || pi_ref): ``exp(d) - d - 1``, ``d = ref - logp``.

    Non-negative, 0 with zero gradient where ``logp == ref``, and unbiased for samples drawn from pi
    (Schulman's "approximating KL" note): ``E_pi[k3] = KL(pi || pi_ref)``. Differentiated as a loss at fixed
    samples from pi, its expected gradient is ``E_pi[(1 - pi_ref/pi) grad log pi] = grad KL(pi_ref || pi)``:
    it pulls the policy towards the reference along the reverse KL's gradient, which agrees with the forward
    KL's to first order near the reference (tests/train/test_losses.py checks both on a small softmax).
    """
    d = ref_logprobs - logprobs
    return ((torch.exp(d) - d - 1.0) * mask.to(logprobs.dtype)).sum()


def nll_sum(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of negative log-likelihoods over unmasked tokens (SFT; divide by the global token count)."""
    return -(logprobs * mask.to(logprobs.dtype)).sum()


__all__ = [
    "ADVANTAGE_MODES",
    "clipped_surrogate",
    "group_advantages",
    "is_informative",
    "kl_k3",
    "nll_sum",
    "placebo_shuffle",
]
