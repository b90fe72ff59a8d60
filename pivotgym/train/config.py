"""Trainer configuration: one dataclass per algorithm, sharing the fields of the common loop.

A config is a plain YAML mapping whose keys are the dataclass fields (unknown keys are an error that names
the known ones, so a typo never silently falls back to a default)::

    model: smollm2-135m
    pivots: runs/pivots.jsonl
    steps: 50
    group_size: 8
    output_dir: runs/pivot

``load_config(path, "pivot")`` returns a :class:`PivotConfig`; the CLI does the same for
``pivotgym train pivot --config cfg.yaml``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.config import Source, check_field_choices, check_section, choices, read_yaml
from pivotgym.errors import ConfigError

#: the group-relative advantage estimators (:func:`pivotgym.train.losses.group_advantages`)
ADVANTAGE_MODES = ("std", "no_std", "loo", "rloo_std")

#: how an RL step's size follows its signal (see ``RLConfig.update_scale``)
UPDATE_SCALES = ("informative_share", "full")
OPTIMIZERS = ("adamw", "sgd")
LR_SCHEDULES = ("constant", "linear", "cosine")
MIXED_PRECISIONS = ("auto", "no", "bf16", "fp16")
#: metric sinks (``jsonl`` is always written; ``auto`` adds the installed ones of TensorBoard and W&B)
REPORT_SINKS = ("auto", "jsonl", "none", "tensorboard", "wandb")
#: E2E RL's episode reward and where its episodes start (see ``E2EConfig``)
E2E_REWARDS = ("outcome", "progress")
E2E_STARTS = ("reset", "expert")


def check_report_to(report_to: list[str]) -> None:
    """Raise :class:`ConfigError` (``report_to: tensorboard is not installed``, with the install command) when
    a sink named explicitly cannot be imported: before the run, not at its first logged step."""
    for sink in ("tensorboard", "wandb"):
        if sink in report_to and importlib.util.find_spec(sink) is None:
            raise ConfigError(f"report_to: {sink} is not installed", hint=f"pip install {sink}, or leave {sink} out")


#: ``hf`` sampler options that would move or cast the model they are given: refused for a trainer, whose ``hf``
#: sampler wraps the very model it trains
LIVE_MODEL_OPTIONS = ("dtype", "device")


@dataclass
class TrainConfig:
    """Fields every trainer shares (the loop, optimiser, checkpointing, logging and evaluation)."""

    #: model alias (e.g. ``smollm2-135m``) or a local HF folder; ignored when a model object is passed in
    model: str = "smollm2-135m"
    #: run folder: ``metrics.jsonl``, ``summary.json``, ``checkpoints/`` and the final model ``final/``
    output_dir: str = "runs/train"
    #: seeds the data order, the sampling seeds and torch; the same seed repeats a run
    seed: int = 0
    #: training steps (> 0; each makes ``optimizer_steps_per_step`` optimiser steps)
    steps: int = 10
    #: peak learning rate (reached after the warm-up)
    learning_rate: float = 1e-5
    #: ``adamw`` or ``sgd`` (plain SGD makes an update proportional to the gradient: useful in tests)
    optimizer: str = field(default="adamw", metadata=choices(OPTIMIZERS))
    #: decoupled weight decay of AdamW (0: none)
    weight_decay: float = 0.0
    #: AdamW's (beta1, beta2)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    #: warm-up length in training steps (the schedule itself runs in optimiser steps, see ``lr_schedule``)
    warmup_steps: int = 0
    #: ``constant``, ``linear`` or ``cosine`` (both decay to 0 right after the last optimiser step); all after
    #: the warm-up. The schedule is sized in optimiser steps (``steps * optimizer_steps_per_step``), so it ends
    #: where training ends whatever ``updates_per_batch`` is
    lr_schedule: str = field(default="constant", metadata=choices(LR_SCHEDULES))
    #: clip the global gradient norm to this value before each optimiser step (null or 0: no clipping)
    max_grad_norm: float | None = 1.0
    #: completions (sequences) per forward/backward pass; the step's loss is still normalised over the
    #: whole global batch, so this changes memory, never the update (gradient accumulation)
    micro_batch_size: int = 8
    #: ``auto`` (bf16 on a GPU that supports it, fp32 on CPU), ``no``, ``bf16`` or ``fp16``: autocast of the
    #: forward passes, fp32 weights and optimiser state; the ``hf`` sampler generates in that precision too
    #: (see ``half_precision_sampler``). On a CPU with AMX, bf16 is faster: ``benchmarks/precision.py``
    #: measures it
    mixed_precision: str = field(default="auto", metadata=choices(MIXED_PRECISIONS))
    #: LoRA through peft instead of full fine-tuning
    lora: bool = False
    #: LoRA rank
    lora_r: int = 16
    #: LoRA scaling numerator (the update is scaled by ``lora_alpha / lora_r``)
    lora_alpha: int = 32
    #: dropout on the LoRA branch
    lora_dropout: float = 0.0
    #: module names that get adapters (null: the attention and MLP projections, ``q_proj`` ... ``down_proj``)
    lora_target_modules: list[str] | None = None
    #: recompute activations in the backward pass to save memory (requires ``shared_prefix: false``)
    gradient_checkpointing: bool = False
    #: save a checkpoint every this many steps (0: only at the end); the last ``keep_checkpoints`` are kept
    checkpoint_every: int = 0
    #: how many of the newest checkpoints are kept (older ones are deleted)
    keep_checkpoints: int = 2
    #: how many of the newest kept checkpoints keep their optimizer state (resumable); older ones keep weights only
    keep_optimizer_state: int = 1
    #: save the trained policy as a Hugging Face model folder in ``output_dir/final`` at the end of ``fit``
    #: (loadable by ``pivotgym eval --model`` and transformers; LoRA is saved merged)
    save_final_model: bool = True
    #: ``auto`` resumes from the newest checkpoint in ``output_dir`` when there is one; ``never``; or a path
    resume: str = "auto"
    #: evaluate every this many steps (0: only before and after training)
    eval_every: int = 0
    #: ``jsonl`` is always written; ``auto`` adds TensorBoard and W&B when they are installed
    report_to: list[str] = field(default_factory=lambda: ["auto"], metadata=choices(REPORT_SINKS))
    #: show a progress bar (main process only)
    progress: bool = True
    #: the registered sampler that generates from the policy (rollouts, evaluation): ``hf`` wraps the live
    #: model (transformers); ``vllm`` is a colocated in-process vLLM engine built from ``model`` that receives
    #: the policy's weights after every optimiser step, before it samples again (one process only). A backend
    #: that cannot receive weights (``openai``: a server) is refused, since it would sample a stale policy
    sampler: str = "hf"
    #: keyword arguments of that sampler's constructor: for ``vllm`` the engine's (``dtype``,
    #: ``gpu_memory_utilization``, ``max_model_len``, ``enforce_eager``, ...); for ``hf`` e.g. ``max_batch_size``
    #: (not ``dtype`` or ``device``: it wraps the model being trained, whose precision is ``mixed_precision``)
    sampler_options: dict[str, Any] = field(default_factory=dict)
    #: with ``sampler: hf`` under bf16 or fp16 mixed precision (``auto`` on a GPU), sample from a copy of the
    #: policy in that precision, refreshed after every optimiser step, instead of the live fp32 model under
    #: autocast (which casts every weight again at each forward). Costs half the fp32 model's size in memory.
    #: On a 2-core AMX CPU it sped up sampling turn prompts (prefill-heavy) 1.3-1.6x and not E2E rollouts
    #: (decoding in small batches); ``benchmarks/precision.py`` measures both on your machine
    half_precision_sampler: bool = False

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: Source = Source()) -> TrainConfig:
        """The config of ``data``, checked whole first: an unknown key (with a did-you-mean), a value of the
        wrong kind or one no run could use is a :class:`ConfigError` naming the field (and, with ``source``,
        the file and line), not a ``TypeError`` deep inside the trainer."""
        values = check_section(cls, data, source)
        if "adam_betas" in values:
            values["adam_betas"] = tuple(values["adam_betas"])
        config = cls(**values)
        try:
            config.validate()
        except ConfigError as exc:  # validate() messages start with the field they are about
            where = source.where(str(exc).split(" ", 1)[:1])
            raise ConfigError(f"{where}: {exc}" if where else str(exc), hint=exc.hint) from None
        return config

    def replace(self, **changes: Any) -> TrainConfig:
        new = dataclasses.replace(self, **changes)
        new.validate()
        return new

    @property
    def optimizer_steps_per_step(self) -> int:
        """Optimiser steps one training step makes (1; the RL trainers make ``updates_per_batch``)."""
        return 1

    @property
    def total_optimizer_steps(self) -> int:
        """The length of the LR schedule: every optimiser step of the run."""
        return self.steps * self.optimizer_steps_per_step

    def validate(self) -> None:
        """Raise :class:`ConfigError` for values no run could use."""
        if self.steps < 0:
            raise ConfigError(f"steps must be >= 0, got {self.steps}")
        if self.micro_batch_size < 1:
            raise ConfigError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        check_field_choices(self)
        check_report_to(self.report_to)
        if not self.sampler:
            raise ConfigError("sampler must name a registered sampler (`pivotgym samplers`), got an empty name")
        converting = sorted(set(self.sampler_options) & set(LIVE_MODEL_OPTIONS))
        if self.sampler == "hf" and converting:
            raise ConfigError(
                f"sampler_options: {', '.join(converting)} would convert the model being trained (the hf sampler "
                "generates with the training model itself)",
                hint="set mixed_precision (bf16 autocast) for the trainer's precision; dtype and device are options "
                "of samplers that load a saved model (evaluation, profiling)",
            )


@dataclass
class RLConfig(TrainConfig):
    """Fields of the policy-gradient trainers (pivot and e2e): sampling, advantages and the surrogate."""

    #: completions (pivot) or episodes (e2e) sampled per state or task: the group of the relative advantages
    group_size: int = 8
    #: sampling temperature of the training rollouts
    temperature: float = 1.0
    #: nucleus (top-p) sampling of the training rollouts (1: off)
    top_p: float = 1.0
    #: a cap on new tokens per sampled completion (per turn in e2e); the env's own limit applies, which this
    #: can only shorten (null: the env's own, as in profiling and evaluation)
    max_new_tokens: int | None = None
    #: ``std`` (GRPO), ``no_std`` (Dr. GRPO: mean-centred only), ``loo`` (leave-one-out baseline) or
    #: ``rloo_std`` (leave-one-out baseline over the leave-one-out SD, unnormalised where that SD is 0: NeMo-RL's)
    advantage: str = field(default="std", metadata=choices(ADVANTAGE_MODES))
    #: lower clip: the ratio is clipped to [1 - clip_low, 1 + clip_high]
    clip_low: float = 0.2
    #: upper clip (may differ from ``clip_low``: an asymmetric clip, e.g. 0.28)
    clip_high: float = 0.2
    #: weight of the k3 KL estimate to the frozen reference policy (0 disables it and the reference)
    kl_coef: float = 0.0
    #: optimisation passes over each sampled batch (1 = on-policy; >1 makes the clip matter)
    updates_per_batch: int = 1
    #: share one prefix forward among the G completions of a prompt (same result, less compute)
    shared_prefix: bool = True
    #: functional verifier (``functional``), exact match (``exact``) or a verifier name
    verifier: str = "functional"
    #: evaluation: samples per eval state (pivot) or episodes per eval task (e2e)
    eval_samples: int = 4
    #: evaluation sampling temperature (0 = greedy)
    eval_temperature: float = 1.0
    #: the placebo ablation: each group's advantages are shuffled among its samples (seeded by the run seed,
    #: step and group), so rewards no longer steer the update and its expected signal is zero; what remains
    #: is the harm or benefit of updating at all with these settings
    placebo: bool = False
    #: a step with fewer informative groups (rewards not all equal) than this makes no optimiser step (the
    #: LR schedule still advances); 1 skips only steps with no signal at all. The pivot trainer can instead
    #: ``refill`` the step from its pivot pool
    min_informative_groups: int = 1
    #: ``informative_share`` scales the step's learning rate by (informative groups / groups per step,
    #: at most 1); ``full`` applies every step at the full rate. With AdamW the loss's scale hardly changes
    #: the update (every weight moves ~lr per step whatever backs it), so a step resting on 1 of 4 groups is
    #: made a quarter-size step through its rate, not its loss
    update_scale: str = field(default="informative_share", metadata=choices(UPDATE_SCALES))
    #: log the weights' drift each step: RMS of (theta - theta_0) and of this step's update over the
    #: trainable parameters; keeps two fp32 copies of them in CPU memory (turn off for very large models)
    track_drift: bool = True

    def validate(self) -> None:
        super().validate()
        if self.min_informative_groups < 0:
            raise ConfigError(f"min_informative_groups must be >= 0, got {self.min_informative_groups}")
        if self.group_size < 2:
            raise ConfigError(f"group_size must be >= 2 for group-relative advantages, got {self.group_size}")
        if self.clip_low < 0 or self.clip_high < 0:
            raise ConfigError("clip_low and clip_high must be >= 0")
        if self.updates_per_batch < 1:
            raise ConfigError(f"updates_per_batch must be >= 1, got {self.updates_per_batch}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1 or null (the env's own limit), got {self.max_new_tokens}")
        if self.gradient_checkpointing and self.shared_prefix:
            raise ConfigError(
                "gradient_checkpointing cannot be combined with shared_prefix: the shared prompt's key/value "
                "cache is what checkpointing discards and recomputes (transformers turns the cache off while "
                "checkpointing). Set shared_prefix: false (each completion then runs with its prompt) or "
                "gradient_checkpointing: false"
            )

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.updates_per_batch


@dataclass
class PivotConfig(RLConfig):
    """PivotRL: GRPO on the pivot states of a pivot set."""

    #: pivot set JSONL (from ``pivotgym select``); required
    pivots: str = ""
    #: trajectory JSONL the profiles were made from; needed only for pivot sets written before rows carried
    #: their state (every row ``pivotgym select`` writes now does)
    trajectories: str = ""
    #: optional turn-profile JSONL of the whole profiling run, to count profiling rollout turns exactly
    profiles: str | None = None
    #: pivot states per optimisation step (global, across processes)
    pivots_per_step: int = 4
    #: pivot states scored at each evaluation (the first N of the set; 0 = all)
    eval_pivots: int = 16
    #: a step short of ``min_informative_groups`` draws more pivot states (the next ones of the seeded pivot
    #: order, ``pivots_per_step`` per round) instead of being skipped; refill rollouts count as rollout turns
    refill: bool = False
    #: at most this many refill rounds per step (bounds a step's rollouts to (1 + rounds) x a plain step's)
    refill_rounds: int = 2
    #: greedy pass rate on this many profiled but not selected training states at every evaluation
    #: (``eval_non_pivot_pass``: does training on the pivots break the turns it did not train on?); drawn
    #: by seed from ``profiles`` minus the pivots, or given to the trainer (``non_pivot_states=``); 0: off
    non_pivot_eval: int = 16

    def validate(self) -> None:
        super().validate()
        if self.pivots_per_step < 1:
            raise ConfigError(f"pivots_per_step must be >= 1, got {self.pivots_per_step}")
        if self.refill_rounds < 0:
            raise ConfigError(f"refill_rounds must be >= 0, got {self.refill_rounds}")
        if self.non_pivot_eval < 0:
            raise ConfigError(f"non_pivot_eval must be >= 0 (0: off), got {self.non_pivot_eval}")


@dataclass
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on expert trajectories (loss on assistant tokens only)."""

    #: expert trajectory JSONL (e.g. from ``pivotgym expert``); required
    trajectories: str = ""
    #: trajectories per optimisation step (global)
    trajectories_per_step: int = 4
    #: longer tokenised conversations are truncated (from the end) to this many tokens
    max_length: int = 2048
    #: optional pivot set JSONL to evaluate on (null: no evaluation); same meaning as in :class:`PivotConfig`
    pivots: str | None = None
    #: pivot states scored at each evaluation (the first N of the set; 0 = all)
    eval_pivots: int = 16
    #: completions sampled per eval state
    eval_samples: int = 4
    #: evaluation sampling temperature (0 = greedy)
    eval_temperature: float = 1.0
    #: a cap on new tokens per evaluation completion; the env's own limit applies, which this can only shorten
    #: (null: the env's own)
    max_new_tokens: int | None = None
    #: verifier that scores evaluation completions: ``functional``, ``exact`` or a verifier name
    verifier: str = "functional"


@dataclass
class E2EConfig(RLConfig):
    """End-to-end multi-turn RL: whole episodes with the current policy, outcome reward."""

    #: the env to train in (e.g. ``planning/blocks-v0``); required
    env_id: str = ""
    #: the env split whose tasks are trained on
    split: str = "train"
    #: tasks per optimisation step (global); each runs ``group_size`` episodes. A step is full-size when this
    #: many of its groups are informative (episodes' returns not all equal)
    tasks_per_step: int = 2
    #: at most this many extra tasks per step (global; the next ones of the seeded task order) are drawn, in
    #: rounds, to replace groups whose episodes all got the same return, until ``tasks_per_step`` groups are
    #: informative; their rollout turns count like any other (0: no refill)
    refill_tasks: int = 4
    #: cap on assistant turns per training episode (default: the env's own limit); evaluation episodes are
    #: capped only by the env's own limit
    max_turns: int | None = None
    #: ``outcome`` (the episode's return; the main comparison) or ``progress`` (the env's ``progress()`` at the
    #: episode's end, 1.0 when solved: a partial-progress row; an env without the hook is an error)
    reward: str = field(default="outcome", metadata=choices(E2E_REWARDS))
    #: where each group's episodes start: ``reset`` (the task's initial state: the paper's E2E RL) or ``expert``
    #: (a state of the task's expert trajectory, its turn drawn uniformly per group and seed; the expert's
    #: actions up to it are replayed, not sampled, trained or counted: E2E RL from the states PivotRL profiles,
    #: for a start model that rarely solves a task from its beginning)
    start: str = field(default="reset", metadata=choices(E2E_STARTS))
    #: train each episode as one sequence (its turns packed, the env's observation tokens out of the loss);
    #: false: one sample per turn with its whole prompt (same loss and gradient, more token positions)
    pack_episodes: bool = True
    #: evaluation episodes at the start and end of training (and every ``eval_every`` steps): this split, at
    #: most ``eval_tasks`` tasks, ``eval_samples`` episodes each; null: none (an experiment's held-out curve
    #: points already score the start and the end)
    eval_split: str | None = "test"
    #: evaluation tasks (the first N of ``eval_split``; 0 = all)
    eval_tasks: int = 8

    def validate(self) -> None:
        super().validate()
        if self.tasks_per_step < 1:
            raise ConfigError(f"tasks_per_step must be >= 1, got {self.tasks_per_step}")
        if self.refill_tasks < 0:
            raise ConfigError(f"refill_tasks must be >= 0 (0: no refill), got {self.refill_tasks}")


CONFIGS: dict[str, type[TrainConfig]] = {"pivot": PivotConfig, "sft": SFTConfig, "e2e": E2EConfig}


def load_config(path: str | Path, kind: str, **overrides: Any) -> TrainConfig:
    """Read a YAML config for trainer ``kind`` (``pivot``, ``sft`` or ``e2e``); ``overrides`` win."""
    if kind not in CONFIGS:
        raise ConfigError(f"unknown trainer {kind!r}; choose one of {sorted(CONFIGS)}")
    data, source = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping of field: value")
    data.pop("trainer", None)  # allowed as documentation of which trainer a file is for
    data.update({k: v for k, v in overrides.items() if v is not None})
    return CONFIGS[kind].from_dict(data, source)
