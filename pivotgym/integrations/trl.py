"""TRL's ``GRPOTrainer`` on pivot states: the dataset, the reward function and the matching ``GRPOConfig``.

Three pieces replace the glue a user would otherwise write::

    from trl import GRPOConfig, GRPOTrainer
    from pivotgym.integrations.trl import PivotReward, grpo_config_kwargs, pivot_dataset, trl_model

    dataset = pivot_dataset("pivots.jsonl")     # or the `pivots export --to hf` folder
    args = GRPOConfig(output_dir="runs/trl", **grpo_config_kwargs(group_size=8, dataset=dataset))
    GRPOTrainer(model=trl_model("smollm2-135m"), reward_funcs=PivotReward(), args=args, train_dataset=dataset).train()

* :func:`pivot_dataset` - one row per pivot state: the conversational ``prompt`` our trainer samples from
  (``env.prompt_messages(prefix)``), the exact expert state as JSON (``state``), the functions offered there
  (``tools_json``: the env task's, or an imported NeMo-Gym row's own) and the profile's ``mean``/``var``.
* :class:`PivotReward` - TRL's reward-function signature; each completion is judged by the env's functional
  verifier from the exact state (:class:`~pivotgym.verify.VerifyContext` with the row's tools), through
  :class:`~pivotgym.integrations.common.StateJudge`, which keeps each state's context as our trainer's
  scorer does.
* :func:`grpo_config_kwargs` - the ``GRPOConfig`` settings that match a :class:`~pivotgym.train.PivotConfig`
  where TRL has them, generation capped by the dataset's envs;
* :func:`trl_model` - the folder TRL loads for a pivotgym model name (TRL knows no pivotgym alias).

**Undecided verdicts** (a verifier that raised, timed out or could not judge:
:attr:`pivotgym.types.Verdict.undecided`) are returned as ``None`` by default. TRL 1.16 turns ``None`` into NaN;
a completion for which every reward function returned NaN is *unscorable*: it is left out of its group's
mean and standard deviation (nan-aware) and its advantage is forced to 0, so it does not move the policy.
Our trainer leaves such samples out of the group entirely. ``PivotReward(undecided="zero")`` scores them 0
instead (as our evaluation does); that turns "could not judge" into "wrong", so it is not the default.

**Differences from our trainer** that no TRL setting removes (docs/integrations.md has the full list):

* normaliser: with ``loss_type="dapo"`` TRL divides the summed token losses by *all* completion tokens of
  the generation batch, including groups whose rewards are all equal (advantage 0: no gradient, but their
  tokens count) and unscorable completions. Ours drops zero-variance groups before the forward pass, so its
  denominator counts informative groups only. With ``beta=0`` TRL's gradient is therefore ours times
  ``informative tokens / all tokens`` (:func:`dapo_scale` computes it for a batch). ``dapo`` is still the
  closest: ``grpo`` normalises per sequence, ``dr_grpo`` by a constant, ``bnpo`` per local batch.
* advantages: TRL divides by ``std + 1e-4`` (ours ``std + 1e-6``), both the unbiased (n-1) estimate; our
  ``loo`` advantage is ``no_std`` times ``G / (G - 1)``, which TRL has no switch for (its RLOO is a
  separate trainer).
* prompts are rendered by TRL through the tokenizer's chat template (ours: the sampler's, the same template).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pivotgym.integrations.common import StateJudge
from pivotgym.pivot.formats import to_hf_dataset
from pivotgym.types import PivotSet, Trajectory, TurnProfile, Verdict

if TYPE_CHECKING:
    from datasets import Dataset

    from pivotgym.train.config import PivotConfig

__all__ = [
    "DATASET_COLUMNS",
    "PivotReward",
    "completion_text",
    "dapo_scale",
    "generation_cap_of",
    "grpo_config_kwargs",
    "pivot_dataset",
    "trl_model",
]

#: the columns :class:`PivotReward` reads (beside TRL's ``prompt``); :func:`pivot_dataset` checks them
DATASET_COLUMNS = ("prompt", "env_id", "state", "tools_json")


# ------------------------------------------------------------------------------------------------ dataset
def pivot_dataset(
    pivots: str | Path | PivotSet | Iterable[TurnProfile] | Dataset,
    trajectories: str | Path | Iterable[Trajectory] | None = None,
) -> Dataset:
    """The pivot states as a ``datasets.Dataset`` for ``GRPOTrainer``.

    ``pivots`` is a pivot-set JSONL (from ``pivotgym select``) or its rows, each carrying its state (NeMo-Gym
    rows imported with ``pivotgym pivots import`` carry their tools, which are kept); or the folder
    ``pivotgym pivots export --to hf`` wrote, or such a ``Dataset``. ``trajectories`` (a JSONL path or the
    trajectories themselves) is needed only for pivot sets written before rows carried their state. A dataset
    without the columns the reward function reads (an export made before ``tools_json`` existed lacks it) is an
    error that says what to re-run.
    """
    from datasets import Dataset, load_from_disk

    from pivotgym.jsonl import read_pivot_set, read_trajectories

    if isinstance(pivots, Dataset):
        dataset = pivots
    elif isinstance(pivots, (str, Path)) and Path(pivots).is_dir():
        dataset = load_from_disk(str(pivots))
    else:
        pivot_rows = read_pivot_set(pivots).pivots if isinstance(pivots, (str, Path)) else pivots
        trajs = read_trajectories(trajectories) if isinstance(trajectories, (str, Path)) else trajectories
        dataset = to_hf_dataset(pivot_rows, trajs)
    missing = [c for c in DATASET_COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"the dataset lacks the column(s) {missing}: export it again with `pivotgym pivots export --to hf` "
            "or build it with pivot_dataset(pivots_file)"
        )
    return dataset


# ------------------------------------------------------------------------------------------------ reward
def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The text of one TRL completion: a string (standard format) or a list of messages (conversational
    format; the assistant messages' text, joined)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant")


class PivotReward:
    """A TRL reward function: each completion judged by its env's verifier at the exact pivot state.

    ``verifier`` is ``functional`` (the env's functional verifier, as our trainer uses), ``exact`` or a
    registered verifier name. ``undecided`` says what an undecided verdict returns: ``"none"`` (default;
    TRL leaves the completion out of its group's statistics and gives it advantage 0) or ``"zero"``.
    The verdicts of the last call are kept in :attr:`last_verdicts` (for logging or a test).
    """

    def __init__(self, verifier: str = "functional", *, undecided: Literal["none", "zero"] = "none") -> None:
        if undecided not in ("none", "zero"):
            raise ValueError(f"undecided must be 'none' or 'zero', got {undecided!r}")
        self.undecided = undecided
        self.judge = StateJudge(verifier)
        #: TRL names a reward function's logged metrics after ``__name__``
        self.__name__ = "pivotgym_verifier"
        self.last_verdicts: list[Verdict] = []

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        *,
        state: Sequence[str],
        tools_json: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Rewards of ``completions`` (one per row; TRL repeats each row's columns for its G completions)."""

        if completions is None:
            raise TypeError("PivotReward needs the completions (TRL passes them as `completions`)")
        if len(state) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(state)} states")
        tools = list(tools_json) if tools_json is not None else [None] * len(state)
        rewards: list[float | None] = []
        verdicts = []
        for completion, state_json, tools_of in zip(completions, state, tools):
            verdict = self.judge.verdict(state_json, tools_of, completion_text(completion))
            verdicts.append(verdict)
            if not verdict.decided:
                rewards.append(None if self.undecided == "none" else 0.0)
            else:
                rewards.append(float(verdict.reward))
        self.last_verdicts = verdicts
        return rewards


# ------------------------------------------------------------------------------------------------ config
_SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


def trl_model(name: str | Path) -> str:
    """The folder TRL should load for a pivotgym model name: a bundled alias (``smollm2-135m``, converted on
    first use), a local folder, or a hub id the Hugging Face cache holds. ``GRPOTrainer(model=...)`` takes a
    hub id or a folder and knows no pivotgym alias (``model="smollm2-135m"`` makes it try the hub); an unknown
    name is a :class:`~pivotgym.errors.ModelError` that says how to get it."""
    from pivotgym.sampling.models import resolve_model

    return resolve_model(str(name), progress=False)


def generation_cap_of(dataset: Dataset) -> int:
    """The most new tokens one completion may need on ``dataset``'s pivot states: the largest generation cap
    (:func:`pivotgym.env.generation_cap`) of the envs its rows name, each env's own as our trainer uses it."""
    from pivotgym.env import generation_cap
    from pivotgym.registry import make

    caps = []
    for env_id in sorted(set(dataset["env_id"])):
        env = make(env_id)
        try:
            caps.append(generation_cap(env))
        finally:
            env.close()
    if not caps:
        raise ValueError("the dataset has no rows: no generation cap to take from it")
    return max(caps)


def grpo_config_kwargs(
    config: PivotConfig | None = None, *, dataset: Dataset | None = None, **overrides: Any
) -> dict[str, Any]:
    """Keyword arguments for ``trl.GRPOConfig`` matching ``config`` (our :class:`PivotConfig`; its defaults
    when None) where TRL has the setting: ``num_generations`` = ``group_size``, ``beta`` = ``kl_coef`` (0),
    ``loss_type="dapo"`` (token-level, normalised over the generation batch: the closest to ours, see the
    module docstring), ``scale_rewards`` from ``advantage``, the clip range, sampling temperature/top-p,
    ``num_iterations`` = ``updates_per_batch``, the optimiser and schedule, and one step = ``pivots_per_step``
    groups. ``max_completion_length`` is ``max_new_tokens`` when set, else, given the ``dataset``, the largest
    generation cap of its envs (:func:`generation_cap_of`: TRL's own default, 512 tokens for every state,
    is what made the documented recipe run out of memory). ``overrides`` are config fields (``group_size=4``,
    ``output_dir=...``) or other GRPOConfig keywords (``logging_steps=1``); a GRPOConfig-only keyword wins over
    what the config implies."""
    import dataclasses

    from pivotgym.train.config import PivotConfig

    fields = {f.name for f in dataclasses.fields(PivotConfig)}
    ours = {k: v for k, v in overrides.items() if k in fields}
    theirs = {k: v for k, v in overrides.items() if k not in fields}
    base = config if config is not None else PivotConfig(pivots="-")
    cfg = base.replace(**ours) if ours else base
    if not isinstance(cfg, PivotConfig):
        raise TypeError(f"config must be a PivotConfig, got {type(cfg).__name__}")
    if cfg.advantage == "rloo_std":
        raise ValueError(
            "advantage: rloo_std (leave-one-out SD) has no GRPOConfig equivalent: TRL scales by the group's SD or "
            "not at all; use std or no_std with TRL, or train with `pivotgym train pivot`"
        )
    if cfg.advantage not in ("std", "no_std", "loo"):
        raise ValueError(f"unknown advantage {cfg.advantage!r}")
    if cfg.optimizer not in ("adamw", "sgd"):
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}")
    kwargs: dict[str, Any] = {
        "num_generations": cfg.group_size,
        "beta": cfg.kl_coef,
        "loss_type": "dapo",
        "scale_rewards": "group" if cfg.advantage == "std" else "none",
        "epsilon": cfg.clip_low,
        "epsilon_high": cfg.clip_high,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "num_iterations": cfg.updates_per_batch,
        "learning_rate": cfg.learning_rate,
        "weight_decay": cfg.weight_decay,
        "adam_beta1": cfg.adam_betas[0],
        "adam_beta2": cfg.adam_betas[1],
        "optim": "adamw_torch" if cfg.optimizer == "adamw" else "sgd",
        "lr_scheduler_type": _SCHEDULES.get(cfg.lr_schedule, cfg.lr_schedule),
        "warmup_steps": cfg.warmup_steps,
        "max_grad_norm": cfg.max_grad_norm or 0.0,
        "max_steps": cfg.steps,
        "seed": cfg.seed,
        # one optimiser step per generation batch of `pivots_per_step` groups, as ours (single process)
        "per_device_train_batch_size": cfg.pivots_per_step * cfg.group_size,
        "gradient_accumulation_steps": 1,
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "remove_unused_columns": False,
        "mask_truncated_completions": False,
        "output_dir": cfg.output_dir,
        "disable_tqdm": not cfg.progress,
    }
    if list(cfg.report_to) != ["auto"]:  # ours always writes metrics.jsonl; TRL logs through its callbacks
        kwargs["report_to"] = [r for r in cfg.report_to if r not in ("auto", "jsonl")] or "none"
    if cfg.max_new_tokens:
        kwargs["max_completion_length"] = cfg.max_new_tokens
    elif dataset is not None:
        kwargs["max_completion_length"] = generation_cap_of(dataset)
    if cfg.mixed_precision == "auto":
        import torch

        kwargs["bf16"] = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    else:
        kwargs["bf16"] = cfg.mixed_precision == "bf16"
        kwargs["fp16"] = cfg.mixed_precision == "fp16"
    kwargs.update(theirs)
    return kwargs


def dapo_scale(group_rewards: Sequence[Sequence[float]], group_tokens: Sequence[Sequence[int]]) -> float:
    """How TRL's ``dapo`` gradient compares with ours on one batch (``beta=0``, no undecided samples): the
    share of completion tokens in groups whose rewards differ. TRL's gradient is ours times this factor."""
    from pivotgym.train.losses import is_informative

    total = informative = 0
    for rewards, tokens in zip(group_rewards, group_tokens, strict=True):
        n = sum(tokens)
        total += n
        informative += n if is_informative(rewards) else 0
    return informative / total if total else 0.0
