"""Supervised fine-tuning on expert trajectories, with the loss on assistant tokens only.

A trajectory is rendered the way the policy sees it at RL time (``env.prompt_messages``: assistant turns as
the text the policy would emit) and tokenised once with the chat template. The tokens of each assistant
turn - from the end of the generation prompt through the end-of-turn token - carry the loss; system, user
and tool tokens do not. The loss is the mean over assistant tokens of the whole global batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pivotgym.sampling.logprobs import sequence_logprobs
from pivotgym.train.config import ConfigError, SFTConfig
from pivotgym.train.loop import DataOrder, Trainer, chunks, shard
from pivotgym.train.losses import nll_sum
from pivotgym.train.pivot import evaluate_states
from pivotgym.train.states import PivotState, StateScorer, load_pivot_states
from pivotgym.types import Trajectory


@dataclass
class SFTExample:
    """Token ids of one rendered conversation and a 0/1 mask of the tokens that carry the loss."""

    input_ids: list[int]
    loss_mask: list[int]
    trajectory_id: str = ""
    #: assistant tokens the conversation had before ``max_length`` cut it (0: not cut)
    cut_loss_tokens: int = 0

    @property
    def n_loss_tokens(self) -> int:
        # position 0 is never a target (nothing predicts it)
        return sum(self.loss_mask[1:])


def _template(tokenizer: Any, messages: list[Any], generation_prompt: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
    )
    return [int(x) for x in ids]


def _turn_end(tokenizer: Any, ids: list[int], start: int) -> int:
    """End (exclusive) of the assistant span starting at ``start``: through the first end-of-turn token."""
    stops = {
        t
        for t in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>"))
        if isinstance(t, int) and t >= 0
    }
    for j in range(start, len(ids)):
        if ids[j] in stops:
            return j + 1
    return len(ids)


def build_examples(trajectory: Trajectory, tokenizer: Any, env: Any, max_length: int) -> list[SFTExample]:
    """One example per trajectory (assistant spans masked in), or one per assistant turn when the chat
    template does not tokenise a conversation's prefixes as prefixes of the whole."""
    messages = env.prompt_messages(trajectory.messages)
    assistant_at = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not assistant_at:
        return []
    full = _template(tokenizer, messages, generation_prompt=False)
    mask = [0] * len(full)
    consistent = True
    for i in assistant_at:
        prompt = _template(tokenizer, messages[:i], generation_prompt=True)
        if full[: len(prompt)] != prompt:
            consistent = False
            break
        for j in range(len(prompt), _turn_end(tokenizer, full, len(prompt))):
            mask[j] = 1
    if consistent:
        return [SFTExample(full[:max_length], mask[:max_length], trajectory.id, sum(mask[max(1, max_length) :]))]
    examples = []
    for i in assistant_at:  # fallback: each turn on its own, the way RL samples it
        prompt = _template(tokenizer, messages[:i], generation_prompt=True)
        upto = _template(tokenizer, messages[: i + 1], generation_prompt=False)
        answer = upto[len(prompt) : _turn_end(tokenizer, upto, len(prompt))]
        ids = (prompt + answer)[-max_length:]
        kept = ([0] * len(prompt) + [1] * len(answer))[-max_length:]
        examples.append(SFTExample(ids, kept, trajectory.id, len(answer) - sum(kept[1:])))
    return examples


class SFTTrainer(Trainer):
    """Supervised fine-tuning on expert trajectories (see the module docstring)."""

    name = "sft"
    config_class = SFTConfig
    config: SFTConfig

    def __init__(
        self,
        config: SFTConfig,
        *,
        trajectories: Sequence[Trajectory] | None = None,
        eval_states: Sequence[PivotState] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        self.trajectories = list(trajectories) if trajectories is not None else None
        self._eval_states = list(eval_states) if eval_states is not None else None
        self.scorer = StateScorer()
        self.examples: list[SFTExample] = []

    def setup_data(self) -> None:
        from pivotgym.jsonl import read_trajectories
        from pivotgym.registry import make

        cfg = self.config
        if self.trajectories is None:
            if not cfg.trajectories:
                raise ConfigError(
                    "the sft trainer needs `trajectories` (expert trajectories JSONL, e.g. from "
                    "`pivotgym expert ENV --out FILE`)"
                )
            self.trajectories = read_trajectories(cfg.trajectories)
        envs: dict[str, Any] = {}
        self.examples = []
        for t in self.trajectories:
            env = envs.get(t.env_id) or envs.setdefault(t.env_id, make(t.env_id))
            self.examples.extend(build_examples(t, self.tokenizer, env, cfg.max_length))
        if not self.examples:
            raise ConfigError("no assistant turns to train on in the trajectories")
        self.examples = _within_max_length(self.examples, cfg.max_length)
        if self._eval_states is None and cfg.pivots:
            self._eval_states = load_pivot_states(
                cfg.pivots, self.sampler.encode, cfg.verifier, trajectories=cfg.trajectories or None
            )
        self.order = DataOrder(len(self.examples), cfg.seed)
        self.data_state = {"cursor": 0}

    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        self.order.cursor = int(self.data_state.get("cursor", 0))
        picked = self.order.take(cfg.trajectories_per_step)
        self.data_state = {"cursor": self.order.cursor}
        mine = [self.examples[i] for i in shard(picked, self.rank, self.world)]
        global_tokens = self.reduce_sum(sum(e.n_loss_tokens for e in mine))
        if global_tokens == 0:
            return {"loss": 0.0, "skipped": 1}
        scale = self.world / global_tokens
        loss_sum = 0.0
        with self.counters.time("fwd_bwd"):
            batches = list(chunks(mine, cfg.micro_batch_size))
            if not batches:
                self.dummy_backward()
            for i, batch in enumerate(batches):
                with self.sync_context(last=i == len(batches) - 1), self.accelerator.autocast():
                    logp, target_mask = sequence_logprobs(
                        self.model, [e.input_ids for e in batch], self.pad_id, [e.loss_mask[1:] for e in batch]
                    )
                    loss = nll_sum(logp, target_mask)
                    loss_sum += float(loss.detach())
                    self.accelerator.backward(loss * scale)
            opt = self.optimizer_step()
        self.counters.tokens_trained += int(global_tokens)
        self.counters.samples_trained += int(self.reduce_sum(len(mine)))
        return {
            "loss": self.reduce_sum(loss_sum) / global_tokens,
            "tokens_in_loss": int(global_tokens),
            **{k: v for k, v in opt.items() if v == v},
        }

    def evaluate(self) -> dict[str, Any]:
        if not self._eval_states:
            return {}
        cfg = self.config
        states = self._eval_states[: cfg.eval_pivots] if cfg.eval_pivots else self._eval_states
        return evaluate_states(
            self,
            states,
            self.scorer,
            samples=cfg.eval_samples,
            temperature=cfg.eval_temperature,
            max_new_tokens=cfg.max_new_tokens,
            seed=cfg.seed,
        )


def _within_max_length(examples: list[SFTExample], max_length: int) -> list[SFTExample]:
    """The examples that keep an assistant token inside ``max_length``; a warning names the assistant tokens the
    cut removed, and an error says when nothing is left to train on (a long system prompt - a tool-use policy
    with its schemas - can be longer than the whole default ``max_length``)."""
    import warnings

    cut = sum(e.cut_loss_tokens for e in examples)
    kept = [e for e in examples if e.n_loss_tokens > 0]
    if not kept:
        raise ConfigError(
            f"max_length {max_length} cuts every assistant token of the {len(examples)} example(s): the "
            "conversations only reach an assistant turn further in; raise the SFT section's max_length (up to "
            "the model's context window)"
        )
    if cut:
        total = cut + sum(e.n_loss_tokens for e in examples)
        warnings.warn(
            f"max_length {max_length} cuts {cut} of {total} assistant tokens ({len(examples) - len(kept)} of "
            f"{len(examples)} examples have none left); those turns are not trained on - raise max_length to "
            "keep them",
            stacklevel=3,
        )
    return kept


__all__ = ["SFTExample", "SFTTrainer", "build_examples"]
