"""The loop every trainer shares: setup (model, LoRA, optimiser, accelerate), steps, evaluation, metrics,
checkpoints and resume. A trainer subclass implements :meth:`Trainer.setup_data`, :meth:`Trainer.train_step`
and :meth:`Trainer.evaluate`, and keeps its data position in ``self.data_state`` (saved in checkpoints).

Runs unchanged on one CPU, one GPU or many (``accelerate launch`` / ``torchrun``; DDP or FSDP as chosen
by the accelerate config). Every process computes the same data order; each takes its share of a step's
global batch (see :class:`DataOrder`), and losses are normalised over the global batch.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pivotgym.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from pivotgym.train.config import ConfigError, TrainConfig
from pivotgym.train.counters import Counters
from pivotgym.train.metrics import MetricsLogger
from pivotgym.train.policy_sampler import LIVE_SAMPLER

#: the dtype a trainer's live sampler autocasts to under each accelerate ``mixed_precision`` (none: fp32)
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: ``callback(trainer, row)`` is called on every process after each step's metrics row is logged
StepCallback = Callable[["Trainer", dict[str, Any]], None]


@dataclass
class DataOrder:
    """A reproducible endless order over ``n`` items: a fresh seeded shuffle every epoch.

    The position is one integer (``cursor``, items drawn so far), so saving and restoring it resumes the
    exact same sequence. ``take(k)`` returns the next ``k`` global indices; every process computes the same.
    """

    n: int
    seed: int
    cursor: int = 0
    shuffle: bool = True

    def _epoch(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        if self.n == 0:
            raise ValueError("no training items: the data set is empty")
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, self.n)
            out.append(self._epoch(epoch)[pos])
            self.cursor += 1
        return out


def shard(items: Sequence[Any], rank: int, world: int) -> list[Any]:
    """This process's share of a global batch (strided, so shares differ by at most one item)."""
    return list(items[rank::world])


def sample_seed(seed: int, step: int, index: int, salt: int = 0) -> int:
    """A sampling seed that depends only on the run seed, the step and the global item index, so the
    samples are the same whatever the number of processes (and after a resume)."""
    return (seed * 1_000_003 + step * 10_007 + index * 101 + salt) % (2**31 - 1)


class Trainer:
    """Base trainer: owns the model, optimiser, scheduler, accelerator, counters, metrics and checkpoints."""

    name = "base"
    config_class: type[TrainConfig] = TrainConfig

    def __init__(
        self,
        config: TrainConfig,
        *,
        model: Any = None,
        tokenizer: Any = None,
        sampler: Any = None,
        accelerator: Any = None,
    ) -> None:
        if not isinstance(config, self.config_class):
            raise ConfigError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
            )
        config.validate()
        if config.steps == 0:  # refused before loading anything: 0 steps would only evaluate and checkpoint
            raise ConfigError(
                "steps is 0: a training run needs steps >= 1 (steps: 0 / --steps 0 would train "
                "nothing); to score a model without training use `pivotgym eval --model PATH`"
            )
        self.config = config
        self.output_dir = Path(config.output_dir)
        self.accelerator = accelerator or build_accelerator(config)
        _seed_everything(config.seed)
        model_given = model is not None
        if model is None:
            from pivotgym.sampling.models import load_model_and_tokenizer

            # fp32 master weights; bf16 (when on) comes from accelerate's autocast
            model, loaded_tokenizer = load_model_and_tokenizer(
                config.model, device=self.accelerator.device, dtype=torch.float32
            )
            tokenizer = tokenizer or loaded_tokenizer
        self.tokenizer = tokenizer
        model = self._maybe_lora(model)
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer: torch.optim.Optimizer
        if config.optimizer == "sgd":
            optimizer = torch.optim.SGD(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        else:
            optimizer = torch.optim.AdamW(
                params,
                lr=config.learning_rate,
                weight_decay=config.weight_decay,
                betas=(config.adam_betas[0], config.adam_betas[1]),
            )
        # the scheduler is stepped once per optimisation step whatever the number of processes, so it is
        # registered for checkpointing but not wrapped by accelerate (which would step it once per process)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self._lr_lambda)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.accelerator.register_for_checkpointing(self.scheduler)
        self.counters = Counters()
        self.step = 0
        self.data_state: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.last_eval: dict[str, Any] | None = None
        self.final_model_dir: Path | None = None
        self._model_given = model_given
        self._sampler = sampler
        self._sampler_given = sampler is not None  # the caller's to close
        #: bumped whenever the policy's weights change (optimiser step, resume); a copying sampler is pushed
        #: the weights when its copy is older
        self.weights_version = 0
        self._sampler_version: int | None = None
        #: the dtype of the ``hf`` sampler's own copy of the policy (``half_precision_sampler`` under bf16 or
        #: fp16 mixed precision); None when the sampler wraps the live model or is given or another backend
        self.sampler_copy_dtype: torch.dtype | None = None
        if sampler is None and config.sampler == LIVE_SAMPLER and config.half_precision_sampler:
            self.sampler_copy_dtype = AUTOCAST_DTYPES.get(str(self.accelerator.mixed_precision))
        self.pad_id = _pad_id(tokenizer, self.unwrapped_model)
        if sampler is not None and self.copies_weights:
            from pivotgym.train.policy_sampler import weight_loader

            weight_loader(sampler, config.sampler)  # refuses a sampler that cannot follow the policy, now

    # ------------------------------------------------------------------ building blocks
    @property
    def unwrapped_model(self) -> Any:
        return self.accelerator.unwrap_model(self.model)

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def copies_weights(self) -> bool:
        """Whether the sampler holds its own copy of the weights (``sampler`` other than ``hf``, or the ``hf``
        sampler's half-precision copy), which is pushed the policy's weights after they change."""
        return self.config.sampler != LIVE_SAMPLER or self.sampler_copy_dtype is not None

    @property
    def sampler(self) -> Any:
        """The sampler that generates from the *current* policy: with ``sampler: hf`` it wraps the unwrapped
        model in place (autocast to the trainer's precision) or, under half-precision mixed precision, a copy of
        it in that precision (``half_precision_sampler``); otherwise (``vllm``) a colocated engine built on first
        use. A copy is pushed the policy's weights whenever they changed since its last use (see
        :mod:`pivotgym.train.policy_sampler`)."""
        if self._sampler is None:
            if self.config.sampler != LIVE_SAMPLER:
                self._sampler = self._build_engine()
            else:
                from pivotgym.sampling.hf import HFSampler
                from pivotgym.train.policy_sampler import sampling_copy

                copy_dtype = self.sampler_copy_dtype
                if copy_dtype is None:  # the live model, autocast to the trainer's precision
                    model, autocast = self.unwrapped_model, AUTOCAST_DTYPES.get(str(self.accelerator.mixed_precision))
                else:
                    model, autocast = sampling_copy(self.unwrapped_model, copy_dtype), None
                self._sampler = HFSampler(model, self.tokenizer, autocast_dtype=autocast, **self.config.sampler_options)
                self._sampler_version = self.weights_version  # the copy is of the current weights
        if self.copies_weights and self._sampler_version != self.weights_version:
            from pivotgym.train.policy_sampler import push_weights

            push_weights(self._sampler, self.unwrapped_model, self.config.sampler)
            self._sampler_version = self.weights_version
        return self._sampler

    def close(self) -> None:
        """Shut down the colocated engine this trainer built (``sampler: vllm``), freeing its memory now rather
        than never (see :func:`~pivotgym.sampling.base.close_sampler`); a sampler the caller gave is left to the
        caller. The trainer stays usable: :attr:`sampler` builds a new engine on next use. Also ``with
        Trainer(...) as trainer:``."""
        from pivotgym.sampling.base import close_sampler

        if self._sampler is None or self._sampler_given:
            return
        sampler, self._sampler, self._sampler_version = self._sampler, None, None
        close_sampler(sampler)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build_engine(self) -> Any:
        """The colocated sampler of ``config.sampler``, built from the starting model's folder (the trainer's
        ``model`` when it loaded it; else the given model saved under ``output_dir/sampler-init``)."""
        from pivotgym.registry import make_sampler
        from pivotgym.train.policy_sampler import colocated_engine_env, weight_loader

        cfg = self.config
        if self.world > 1:
            raise ConfigError(
                f"sampler: {cfg.sampler} runs one colocated engine in one process; with "
                f"{self.world} processes use sampler: hf"
            )
        if self._model_given:
            from pivotgym.train.export import save_model

            source = str(save_model(self.unwrapped_model, self.tokenizer, self.output_dir / "sampler-init"))
        else:
            from pivotgym.sampling.models import resolve_model

            source = resolve_model(cfg.model)
        colocated_engine_env()
        sampler = make_sampler(cfg.sampler, source, cfg.sampler_options)
        weight_loader(sampler, cfg.sampler)
        return sampler

    def _maybe_lora(self, model: Any) -> Any:
        if not self.config.lora:
            return model
        from peft import LoraConfig, get_peft_model

        targets = self.config.lora_target_modules or [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
        lora = LoraConfig(
            r=self.config.lora_r,
            lora_alpha=self.config.lora_alpha,
            lora_dropout=self.config.lora_dropout,
            target_modules=targets,
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, lora)

    def _lr_lambda(self, step: int) -> float:
        """LR factor at optimiser step ``step`` (0-based; the scheduler counts optimiser steps). Warm-up and
        decay are sized in optimiser steps, so the decay ends (factor 0) right after the run's last one."""
        cfg = self.config
        per = cfg.optimizer_steps_per_step
        warmup, total = cfg.warmup_steps * per, cfg.total_optimizer_steps
        if warmup and step < warmup:
            return (step + 1) / warmup
        if cfg.lr_schedule == "constant":
            return 1.0
        span = max(1, total - warmup)
        progress = min(1.0, (step - warmup) / span)
        if cfg.lr_schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def reduce_sum(self, value: float | int) -> float:
        """Sum of a number over processes (itself on one process)."""
        if self.world == 1:
            return float(value)
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        return float(self.accelerator.reduce(t, reduction="sum").item())

    def optimizer_step(self) -> dict[str, float]:
        """Clip, step the optimiser and the scheduler, zero the gradients; returns grad norm and lr."""
        grad_norm = float("nan")
        if self.config.max_grad_norm:
            norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
            grad_norm = float(norm)
        lr = float(self.scheduler.get_last_lr()[0])
        self.optimizer.step()
        self.weights_version += 1
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": grad_norm, "lr": lr}

    def skip_optimizer_steps(self, n: int) -> None:
        """Advance the LR schedule by ``n`` optimiser steps that were skipped (a batch with nothing to learn
        from), so the schedule stays aligned with training steps and still ends with the run."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "scheduler.step() before optimizer.step()"
            for _ in range(n):
                self.scheduler.step()

    def sync_context(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Gradient all-reduce only on the last micro-batch of a step (gradient accumulation)."""
        return contextlib.nullcontext() if last or self.world == 1 else self.accelerator.no_sync(self.model)

    def dummy_backward(self) -> None:
        """A zero-valued backward through the wrapped model, so a process with no data this step still
        joins the gradient all-reduce of the others."""
        ids = torch.tensor([[self.pad_id]], device=self.device)
        with self.accelerator.autocast():
            loss = self.model(input_ids=ids, use_cache=False).logits.float().sum() * 0.0
        self.accelerator.backward(loss)

    # ------------------------------------------------------------------ to implement
    def setup_data(self) -> None:
        """Load the training data and set ``self.data_state`` to its initial position."""
        raise NotImplementedError

    def train_step(self, step: int) -> dict[str, Any]:
        """Run optimisation step ``step`` (0-based); return the step's metrics (counters are added)."""
        raise NotImplementedError

    def evaluate(self) -> dict[str, Any]:
        """In-domain evaluation; must include ``score`` (higher is better)."""
        return {}

    # ------------------------------------------------------------------ state
    def trainer_state(self) -> dict[str, Any]:
        return {
            "trainer": self.name,
            "step": self.step,
            "data": self.data_state,
            "counters": self.counters.to_dict(),
            "config": self.config.to_dict(),
            "last_eval": self.last_eval,
        }

    def save(self) -> Path:
        """Checkpoint now (every process must call it)."""
        with self._timed_other():
            return save_checkpoint(
                self.accelerator,
                self.output_dir,
                self.step,
                self.trainer_state(),
                keep=self.config.keep_checkpoints,
                keep_optimizer=self.config.keep_optimizer_state,
            )

    def save_final_model(self, out_dir: str | Path | None = None) -> Path:
        """Save the current policy as a loadable Hugging Face model folder (default ``output_dir/final``;
        LoRA merged) on the main process; every process must call it. Returns the folder."""
        from pivotgym.train.export import FINAL_MODEL_DIR, save_model

        out = Path(out_dir) if out_dir is not None else self.output_dir / FINAL_MODEL_DIR
        with self._timed_other():
            if self.accelerator.is_main_process:
                save_model(
                    self.unwrapped_model,
                    self.tokenizer,
                    out,
                    info={"trainer": self.name, "step": self.step, "base_model": self.config.model},
                )
            self.accelerator.wait_for_everyone()
        return out

    def _timed_other(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def maybe_resume(self) -> Path | None:
        """Load the checkpoint selected by ``config.resume``; returns its path (None when starting fresh)."""
        choice = self.config.resume
        if choice == "never":
            return None
        path = latest_checkpoint(self.output_dir) if choice == "auto" else Path(choice)
        if path is None:
            return None
        state = load_checkpoint(self.accelerator, path)
        self.weights_version += 1  # the checkpoint's weights replaced the starting ones
        if state.get("trainer") != self.name:
            raise ConfigError(
                f"{path} is a checkpoint of the {state.get('trainer')!r} trainer, not {self.name!r}; "
                "use another output_dir or resume: never"
            )
        self.step = int(state["step"])
        self.data_state = dict(state.get("data") or {})
        self.counters = Counters.from_dict(state.get("counters") or {})
        self.last_eval = state.get("last_eval")
        return path

    # ------------------------------------------------------------------ the loop
    def fit(self, callbacks: Sequence[StepCallback] = ()) -> dict[str, Any]:
        """Train for ``config.steps`` steps (continuing a checkpoint when one is found); returns the summary,
        also written to ``output_dir/summary.json``."""
        from tqdm.auto import tqdm

        cfg = self.config
        self.setup_data()
        resumed = self.maybe_resume()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        logger = MetricsLogger(
            self.output_dir,
            report_to=cfg.report_to,
            enabled=self.accelerator.is_main_process,
            resume_step=self.step if resumed else None,
            run_name=f"{self.name}",
            config=cfg.to_dict(),
        )
        self.counters.start()
        try:
            if resumed is None and self.step == 0:
                self._run_eval(logger)
            bar = tqdm(
                total=cfg.steps,
                initial=self.step,
                desc=f"train {self.name}",
                unit="step",
                disable=not (cfg.progress and self.accelerator.is_local_main_process) or None,
            )
            with bar:
                while self.step < cfg.steps:
                    metrics = self.train_step(self.step)
                    self.step += 1
                    self.counters.steps = self.step
                    row = {"step": self.step, "kind": "train", **metrics, **self.counters.snapshot()}
                    logger.log(row)
                    self.history.append(row)
                    bar.update(1)
                    bar.set_postfix(
                        {k: f"{row[k]:.3g}" for k in ("loss", "reward_mean") if isinstance(row.get(k), (int, float))}
                    )
                    if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                        self._run_eval(logger)
                    if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < cfg.steps:
                        self.save()
                    for callback in callbacks:
                        callback(self, row)
            if resumed is None or self.step > int(resumed.name.split("-")[-1]):
                self._run_eval(logger)
            if cfg.checkpoint_every or cfg.steps:
                self.save()
            if cfg.save_final_model:
                self.final_model_dir = self.save_final_model()
            summary = self.summary()
            if self.accelerator.is_main_process:
                import json

                (self.output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            return summary
        finally:
            logger.close()

    def _run_eval(self, logger: MetricsLogger) -> None:
        with self.counters.time("eval"):
            result = self.evaluate()
        if not result:
            return
        self.last_eval = {"step": self.step, **result}
        row = {
            "step": self.step,
            "kind": "eval",
            **{f"eval_{k}": v for k, v in result.items()},
            **self.counters.snapshot(),
        }
        logger.log(row)
        self.history.append(row)

    def summary(self) -> dict[str, Any]:
        evals = [r for r in self.history if r.get("kind") == "eval"]
        return {
            "trainer": self.name,
            "steps": self.step,
            "output_dir": str(self.output_dir),
            "final_model": str(self.final_model_dir) if self.final_model_dir else None,
            "counters": self.counters.snapshot(),
            "final_eval": self.last_eval,
            "eval_curve": [
                {
                    "step": r["step"],
                    "score": r.get("eval_score"),
                    "total_turns": r["total_turns"],
                    "wall_seconds": r["wall_seconds"],
                }
                for r in evals
            ],
        }


# ---------------------------------------------------------------------------- helpers
def build_accelerator(config: TrainConfig) -> Any:
    """An ``accelerate.Accelerator`` for the config: bf16 on a capable GPU when ``mixed_precision: auto``."""
    from accelerate import Accelerator

    precision = resolved_precision(config.mixed_precision)
    _forget_other_precision(precision)
    # cpu=True on a machine without CUDA is what makes accelerate run DDP over gloo under torchrun
    return Accelerator(mixed_precision=precision, cpu=not torch.cuda.is_available())


def resolved_precision(mixed_precision: str) -> str:
    """What a ``mixed_precision`` setting means on this machine: ``auto`` is bf16 on a GPU that supports it,
    else ``no`` (fp32)."""
    if mixed_precision == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return mixed_precision


def _forget_other_precision(precision: str) -> None:
    """Let this trainer use another mixed precision than the one before it in the process (an experiment's
    sections may differ). accelerate keeps one process-wide state and refuses a second precision ("restart
    your runtime"); dropping that state, but not the distributed one beneath it, lets the next Accelerator
    set its own."""
    from accelerate.state import AcceleratorState

    current = AcceleratorState._shared_state.get("_mixed_precision")
    if current is not None and str(current) != precision:
        AcceleratorState._reset_state(reset_partial_state=False)


def _seed_everything(seed: int) -> None:
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _pad_id(tokenizer: Any, model: Any) -> int:
    for source in (tokenizer, getattr(model, "config", None)):
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(source, attr, None) if source is not None else None
            if isinstance(value, list):
                value = value[0] if value else None
            if value is not None:
                return int(value)
    return 0


def chunks(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


__all__ = ["DataOrder", "StepCallback", "Trainer", "build_accelerator", "chunks", "sample_seed", "shard"]
