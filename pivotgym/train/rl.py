"""The policy-gradient update shared by the pivot and e2e trainers.

A step's data is a list of :class:`PolicySample` (prompt token ids exactly as sampled from, completion
token ids exactly as generated, one advantage per sample) for *this process*. :meth:`RLTrainer.policy_update`
turns it into one optimiser step with the clipped surrogate of :mod:`pivotgym.train.losses`, normalised by
the number of completion tokens in the *global* batch (summed over micro-batches and processes).

:meth:`RLTrainer.apply_update` is the step a trainer makes from its groups: it ties the update's size to
its signal (skips a step with fewer than ``min_informative_groups`` informative groups; with
``update_scale: informative_share`` scales the step's learning rate by the informative share, since AdamW
makes every step ~lr per weight whatever the loss's scale), counts what was *applied* (steps, optimiser
steps, groups; :class:`~pivotgym.train.counters.Counters`) and logs the weights' drift from the start.
The ``placebo`` ablation shuffles each group's advantages with :meth:`RLTrainer.placebo_rng`.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pivotgym.errors import ConfigError
from pivotgym.sampling.logprobs import completion_logprobs
from pivotgym.train.config import RLConfig
from pivotgym.train.loop import Trainer, chunks, sample_seed
from pivotgym.train.losses import clipped_surrogate, group_advantages, is_informative, kl_k3, placebo_shuffle

#: salt of the placebo's permutation seeds (distinct from the sampling seeds')
PLACEBO_SALT = 31_337


@dataclass
class PolicySample:
    """One sampled completion to train on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    reward: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    #: the sampler's logprob of each completion token, as it recorded them (None: not recorded); the loss
    #: recomputes them with the policy, and their agreement is logged as ``sampler_ratio``
    sampler_logprobs: list[float] | None = None


@dataclass
class MicroBatch:
    """Samples that share one prompt (one forward pass; the prompt runs once when the prefix is shared)."""

    prompt_ids: list[int]
    samples: list[PolicySample]
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        return sum(len(s.completion_ids) for s in self.samples)


def make_micro_batches(samples: Sequence[PolicySample], size: int) -> list[MicroBatch]:
    """Group samples by identical prompt (order of first appearance), then cut groups to ``size``."""
    groups: OrderedDict[tuple[int, ...], list[PolicySample]] = OrderedDict()
    for s in samples:
        if s.completion_ids:
            groups.setdefault(tuple(s.prompt_ids), []).append(s)
    out = []
    for prompt, members in groups.items():
        for part in chunks(members, size):
            out.append(MicroBatch(list(prompt), part))
    return out


def group_samples(
    prompt_ids: Sequence[int],
    completions: Sequence[Sequence[int]],
    rewards: Sequence[float],
    mode: str = "std",
    meta: dict[str, Any] | None = None,
    logprobs: Sequence[Sequence[float]] | None = None,
    placebo: random.Random | None = None,
) -> list[PolicySample]:
    """The training samples of one group (G completions of one prompt with their rewards, and optionally the
    sampler's logprobs of their tokens).

    A group whose rewards all agree carries no signal and returns ``[]``: it adds neither gradient nor
    tokens to the loss's denominator (it never dilutes the informative groups). With ``placebo`` (a seeded
    RNG, see :meth:`RLTrainer.placebo_rng`) the group's advantages are shuffled among its samples
    (:func:`~pivotgym.train.losses.placebo_shuffle`); each sample keeps its own reward.
    """
    if len(completions) != len(rewards):
        raise ValueError(f"{len(completions)} completions but {len(rewards)} rewards")
    if logprobs is not None and len(logprobs) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(logprobs)} logprob lists")
    if not is_informative(rewards):
        return []
    advantages = group_advantages(rewards, mode)
    if placebo is not None:
        advantages = placebo_shuffle(advantages, placebo)
    recorded = list(logprobs) if logprobs is not None else [None] * len(completions)
    return [
        PolicySample(
            list(prompt_ids),
            list(c),
            float(a),
            float(r),
            dict(meta or {}),
            [float(x) for x in lp] if lp is not None and len(lp) == len(c) else None,
        )
        for c, a, r, lp in zip(completions, advantages.tolist(), rewards, recorded)
    ]


def sampler_agreement(logp: torch.Tensor, mask: torch.Tensor, samples: Sequence[PolicySample]) -> tuple[float, ...]:
    """``(sum of exp(policy - sampler), sum of |policy - sampler|, tokens)`` over the tokens of the samples
    whose sampler logprobs were recorded: how far the sampler's distribution is from the policy's (ratio 1
    and gap 0 when they are the same model at the same precision)."""
    ratio = gap = tokens = 0.0
    for row, sample in enumerate(samples):
        recorded = sample.sampler_logprobs
        if recorded is None:
            continue
        n = len(recorded)
        policy = logp[row, :n].detach().double()
        diff = policy - torch.tensor(recorded, dtype=torch.float64, device=policy.device)
        keep = mask[row, :n].bool()
        ratio += float(diff[keep].exp().sum())
        gap += float(diff[keep].abs().sum())
        tokens += float(keep.sum())
    return ratio, gap, tokens


class RLTrainer(Trainer):
    """Adds the clipped-surrogate update (and the frozen reference for the optional KL) to :class:`Trainer`."""

    config: RLConfig

    def __init__(self, config: RLConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self._reference: Any = None
        if config.kl_coef > 0 and not config.lora:
            import copy

            self._reference = copy.deepcopy(self.unwrapped_model).eval().requires_grad_(False)
        self.counters.track_applied()
        #: the trainable parameters at the start (fp32, CPU), for the drift; None with ``track_drift: false``
        self._theta0: list[torch.Tensor] | None = self._trainable_copy() if config.track_drift else None
        self._before: list[torch.Tensor] | None = None
        self._lr_scale = 1.0
        self._placebo_draws = 0  # placebo RNGs handed out since the last update (placebo must be wired)

    # ------------------------------------------------------------------ placebo
    def placebo_rng(self, step: int, group: int) -> random.Random | None:
        """The RNG that shuffles group ``group``'s advantages at training step ``step`` with ``placebo: true``
        (pass it to :func:`group_samples`), else None. Seeded by the run seed, the step and the group's
        global index alone: the same permutation whatever the number of processes, and after a resume."""
        if not self.config.placebo:
            return None
        self._placebo_draws += 1
        return random.Random(sample_seed(self.config.seed, step, group, PLACEBO_SALT))

    # ------------------------------------------------------------------ drift
    def _trainable(self) -> list[torch.Tensor]:
        return [p for p in self.unwrapped_model.parameters() if p.requires_grad]

    @torch.no_grad()
    def _trainable_copy(self, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """The trainable parameters as fp32 CPU tensors (copied into ``into``'s buffers when given)."""
        if into is None:
            return [p.detach().to("cpu", torch.float32, copy=True) for p in self._trainable()]
        for buffer, p in zip(into, self._trainable()):
            buffer.copy_(p.detach())
        return into

    @torch.no_grad()
    def weight_drift(self, before: Sequence[torch.Tensor] | None = None) -> dict[str, float]:
        """``drift_rms``: RMS over the trainable parameters of ``theta - theta_0`` (the start); with
        ``before`` (a copy taken before this step's update) also ``update_rms``, the RMS of this step's change."""
        if self._theta0 is None:
            return {}
        total = update = 0.0
        n = 0
        for i, p in enumerate(self._trainable()):
            now = p.detach().to("cpu", torch.float32).flatten()
            diff = now - self._theta0[i].flatten()
            total += float(torch.dot(diff, diff))
            if before is not None:
                torch.sub(now, before[i].flatten(), out=diff)
                update += float(torch.dot(diff, diff))
            n += now.numel()
        out = {"drift_rms": math.sqrt(total / max(1, n))}
        if before is not None:
            out["update_rms"] = math.sqrt(update / max(1, n))
        return out

    # ------------------------------------------------------------------ the step a trainer makes
    def apply_update(
        self, samples: Sequence[PolicySample], *, informative: float, groups: float, planned: int
    ) -> dict[str, Any]:
        """The update of one training step whose groups were sampled: ``informative`` of ``groups`` groups
        (global counts) carry signal, ``planned`` groups make a full step (``pivots_per_step``,
        ``tasks_per_step``). Every process must call it.

        Fewer informative groups than ``min_informative_groups``: no optimiser step (the schedule advances,
        ``skipped`` is 1). Else :meth:`policy_update`, its learning rate scaled by ``informative / planned``
        (at most 1) with ``update_scale: informative_share``. Counts ``groups_sampled`` always and
        ``groups_applied`` when applied; returns the update's statistics with ``groups``,
        ``groups_informative``, ``lr_scale`` and the drift (``drift_rms``, ``update_rms``)."""
        cfg = self.config
        n_informative, n_groups = int(round(informative)), int(round(groups))
        stats: dict[str, Any] = {"groups": n_groups, "groups_informative": n_informative}
        self.counters.add_applied(groups_sampled=n_groups)
        if n_informative < cfg.min_informative_groups:
            self.skip_optimizer_steps(cfg.updates_per_batch)
            self._placebo_draws = 0
            stats.update(loss=0.0, skipped=1, tokens_in_loss=0, lr_scale=0.0, skip_reason="few_informative_groups")
            stats.update(self.weight_drift(self._theta0))  # unchanged weights: update_rms 0
            return stats
        scale = 1.0
        if cfg.update_scale == "informative_share" and planned > 0:
            scale = min(1.0, n_informative / planned)
        before = None
        if self._theta0 is not None:  # one reused buffer set for the weights before this step
            before = self._before = self._trainable_copy(self._before)
        self._lr_scale = scale
        try:
            stats.update(self.policy_update(samples))
        finally:
            self._lr_scale = 1.0
        if stats.get("skipped"):
            stats.update(lr_scale=0.0, skip_reason="no_tokens")
        else:
            stats["lr_scale"] = scale
            self.counters.add_applied(groups_applied=n_informative)
        if before is not None:
            stats.update(self.weight_drift(before))
        return stats

    def optimizer_step(self) -> dict[str, float]:
        """The shared optimiser step at this update's learning-rate scale (set by :meth:`apply_update`; the
        scheduler resets the rate right after); the returned ``lr`` is the rate used."""
        scale = self._lr_scale
        if scale != 1.0:
            for group in self.optimizer.param_groups:
                group["lr"] *= scale
        out = super().optimizer_step()
        out["lr"] *= scale
        return out

    # ------------------------------------------------------------------ log-probabilities
    def _logprobs(self, model: Any, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        with self.accelerator.autocast():
            return completion_logprobs(
                model,
                mb.prompt_ids,
                [s.completion_ids for s in mb.samples],
                shared_prefix=self.config.shared_prefix,
                pad_id=self.pad_id,
            )

    @torch.no_grad()
    def _reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        if self._reference is not None:
            return self._logprobs(self._reference, mb)[0]
        model = self.unwrapped_model  # LoRA: the reference is the base model, adapters switched off
        with model.disable_adapter():
            return self._logprobs(model, mb)[0]

    # ------------------------------------------------------------------ the update
    def prepare_batches(self, samples: Sequence[PolicySample]) -> tuple[list[MicroBatch], float]:
        """Micro-batches of this process's samples and the token count of the global batch; computes the
        old (behaviour) log-probabilities when several passes are made, and the reference ones for the KL."""
        cfg = self.config
        batches = make_micro_batches(samples, cfg.micro_batch_size)
        global_tokens = self.reduce_sum(sum(mb.n_tokens for mb in batches))
        if global_tokens and (cfg.updates_per_batch > 1 or cfg.kl_coef > 0):
            with torch.no_grad():
                for mb in batches:
                    if cfg.updates_per_batch > 1:
                        mb.old_logprobs = self._logprobs(self.model, mb)[0].detach()
                    if cfg.kl_coef > 0:
                        mb.ref_logprobs = self._reference_logprobs(mb)
        return batches, global_tokens

    def accumulate_gradients(
        self, batches: Sequence[MicroBatch], global_tokens: float, first_pass: bool = True
    ) -> dict[str, float]:
        """Backward of the loss of one pass over the batch into ``.grad`` (all-reduced on the last
        micro-batch). The loss is ``sum over tokens / global_tokens``; returns this process's sums (on the
        first pass also the agreement of the sampler's recorded logprobs with the policy's, see
        :func:`sampler_agreement`)."""
        cfg = self.config
        scale = self.world / global_tokens  # DDP averages gradients over processes: undo it, then / N
        totals = {"pg": 0.0, "kl": 0.0, "clipped": 0.0, "ratio": 0.0, "gap": 0.0, "recorded": 0.0}
        if not batches:
            self.dummy_backward()
        for i, mb in enumerate(batches):
            with self.sync_context(last=i == len(batches) - 1):
                logp, mask = self._logprobs(self.model, mb)
                if first_pass:
                    ratio, gap, recorded = sampler_agreement(logp, mask, mb.samples)
                    totals["ratio"] += ratio
                    totals["gap"] += gap
                    totals["recorded"] += recorded
                old = mb.old_logprobs if mb.old_logprobs is not None else logp.detach()
                adv = torch.tensor([s.advantage for s in mb.samples], device=logp.device)
                pg, n_clipped = clipped_surrogate(logp, old, adv, mask, cfg.clip_low, cfg.clip_high)
                loss = pg
                totals["pg"] += float(pg.detach())
                totals["clipped"] += float(n_clipped)
                if cfg.kl_coef > 0 and mb.ref_logprobs is not None:
                    kl = kl_k3(logp, mb.ref_logprobs, mask)
                    loss = loss + cfg.kl_coef * kl
                    totals["kl"] += float(kl.detach())
                self.accelerator.backward(loss * scale)
        return totals

    def policy_update(self, samples: Sequence[PolicySample]) -> dict[str, Any]:
        """``updates_per_batch`` optimiser steps on this process's samples; every process must call it,
        even with no samples. Returns loss/clip/KL statistics over the global batch."""
        cfg = self.config
        if cfg.placebo and samples and not self._placebo_draws:
            raise ConfigError(
                f"placebo: true, but {type(self).__name__} made its groups without the placebo's shuffle",
                hint="pass placebo=self.placebo_rng(step, group) to group_samples per group, or set placebo: false",
            )
        self._placebo_draws = 0
        batches, global_tokens = self.prepare_batches(samples)
        stats: dict[str, Any] = {"tokens_in_loss": int(global_tokens)}
        if global_tokens == 0:
            stats.update(loss=0.0, skipped=1)
            self.skip_optimizer_steps(cfg.updates_per_batch)
            return stats
        sums = {"pg": 0.0, "kl": 0.0, "clipped": 0.0, "ratio": 0.0, "gap": 0.0, "recorded": 0.0}
        opt_stats: dict[str, float] = {}
        for update in range(cfg.updates_per_batch):
            for key, value in self.accumulate_gradients(batches, global_tokens, first_pass=update == 0).items():
                sums[key] += value
            opt_stats = self.optimizer_step()
        denom = global_tokens * cfg.updates_per_batch
        stats["loss"] = self.reduce_sum(sums["pg"]) / denom
        stats["clip_fraction"] = self.reduce_sum(sums["clipped"]) / denom
        recorded = self.reduce_sum(sums["recorded"])
        if recorded:  # the sampler's logprobs vs the policy's before the update (1 and 0: same distribution)
            stats["sampler_ratio"] = self.reduce_sum(sums["ratio"]) / recorded
            stats["sampler_logprob_gap"] = self.reduce_sum(sums["gap"]) / recorded
        if cfg.kl_coef > 0:
            stats["kl"] = self.reduce_sum(sums["kl"]) / denom
        stats.update({k: v for k, v in opt_stats.items() if not math.isnan(v)})
        self.counters.tokens_trained += int(global_tokens)
        self.counters.samples_trained += int(self.reduce_sum(sum(len(mb.samples) for mb in batches)))
        self.counters.add_applied(steps_applied=1, optimizer_steps_applied=cfg.updates_per_batch)
        return stats


__all__ = [
    "PLACEBO_SALT",
    "MicroBatch",
    "PolicySample",
    "RLTrainer",
    "group_samples",
    "make_micro_batches",
    "sampler_agreement",
]
