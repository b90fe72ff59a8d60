"""The Sampler protocol: prompts (chat messages or token ids) in, completions with token ids and logprobs out.

Contract: a backend keeps the prompt token ids it sampled from (``Completion.prompt_token_ids``) and the
generated ``token_ids`` exactly as produced, so training never re-tokenises generated text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from pivotgym.errors import SamplerError as SamplerError  # re-exported: its old home
from pivotgym.types import Completion, Message

#: a prompt is a chat (list of message dicts; the backend applies the chat template) or token ids
Prompt = Sequence[Message] | Sequence[int]


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@runtime_checkable
class Sampler(Protocol):
    """Generates ``n`` completions per prompt. ``describe()`` identifies the model for cache keys."""

    def sample(
        self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None
    ) -> list[list[Completion]]: ...

    def describe(self) -> dict[str, Any]:
        """``{"model", "revision", "backend"}``: what produced the samples (recorded in turn profiles)."""
        ...


def check_prompt_seeds(seeds: Sequence[int], prompts: int) -> None:
    """Raise ValueError unless there is exactly one seed per prompt (the ``seeds=`` contract of a sampler)."""
    if len(seeds) != prompts:
        raise ValueError(f"seeds: one per prompt, got {len(seeds)} for {prompts} prompts")


def sample_seeded(
    sampler: Sampler, prompts: Sequence[Prompt], n: int, params: SamplingParams, seeds: Sequence[int]
) -> list[list[Completion]]:
    """``n`` completions per prompt, prompt ``i`` under its own ``seeds[i]``.

    A backend that declares ``prompt_seeds = True`` (the transformers and vLLM samplers) gets every prompt in
    one batched call with ``seeds=``; any other backend gets one call per prompt with ``params.seed`` set
    (slower: no batching across prompts). Either way a prompt's samples depend on its seed, not on which other
    prompts came with it, so profiles and training steps reproduce whatever the batching.
    """
    check_prompt_seeds(seeds, len(prompts))
    if not prompts:
        return []
    if getattr(sampler, "prompt_seeds", False):
        return sampler.sample(prompts, n=n, params=params, seeds=list(seeds))  # type: ignore[call-arg]
    return [
        sampler.sample([prompt], n=n, params=replace(params, seed=int(seed)))[0] for prompt, seed in zip(prompts, seeds)
    ]


def close_sampler(sampler: Any) -> None:
    """Free what ``sampler`` holds outside Python's reach, when its backend says how (a ``close()`` method: the
    vLLM engine, the OpenAI client's connections, a trainer's colocated engine); a no-op for the transformers
    sampler, whose model is freed with it. Samplers that own an engine must be closed: vLLM's engine is never
    freed by dropping it."""
    close = getattr(sampler, "close", None)
    if callable(close):
        close()


def encode_prompt(tokenizer: Any, prompt: Prompt | str) -> list[int]:
    """Token ids of a prompt, the same way for every backend that tokenises locally.

    Chat messages get the tokenizer's chat template with the generation prompt; a list of ints passes
    through; a plain string is tokenised as is (no template, no special tokens added).
    """
    if isinstance(prompt, str):
        return [int(x) for x in tokenizer(prompt, add_special_tokens=False)["input_ids"]]
    items = list(prompt)
    if not items:
        raise ValueError("empty prompt: give chat messages or at least one token id")
    if all(isinstance(x, int) for x in items):
        return [x for x in items if isinstance(x, int)]
    if all(isinstance(x, dict) for x in items):
        ids = tokenizer.apply_chat_template(items, add_generation_prompt=True, tokenize=True, return_dict=False)
        return [int(x) for x in ids]
    raise TypeError(
        "a prompt is a list of chat message dicts or a list of token ids, "
        f"got items of type {sorted({type(x).__name__ for x in items})}"
    )


def finish_reason(raw: object) -> str:
    """A server's or engine's finish reason in our terms: ``"stop"`` (EOS or a stop string), ``"length"``
    (``max_new_tokens`` reached), or ``"error"`` for anything else (an aborted request, an engine error, a
    reason we do not know): such a completion may be cut short and must not pass for a finished one."""
    if raw in ("stop", "length"):
        return str(raw)
    return "error"


def window_overflow(prompt_tokens: int, max_new_tokens: int, window: int | None) -> str | None:
    """Why a prompt cannot be sampled within the model's context ``window`` (None when it can): the prompt and
    the new tokens it may grow by must fit, or the model would read positions it was never trained on."""
    if not window or prompt_tokens + max(0, max_new_tokens) <= window:
        return None
    return (
        f"context_window: the prompt has {prompt_tokens} tokens and may grow by {max_new_tokens}, past the "
        f"model's context window of {window} tokens (shorten the history or the env's prompts)"
    )


def sample_within_window(
    sampler: Any,
    encoded: Sequence[list[int]],
    n: int,
    params: SamplingParams,
    seeds: Sequence[int] | None,
    window: int | None,
) -> list[list[Completion]] | None:
    """For a sampler whose model has a context ``window``: None when every prompt of ``encoded`` fits with its
    new tokens (the caller samples them as usual); otherwise the call's whole answer, the prompts that fit
    sampled by ``sampler.sample`` (with ``seeds`` exactly as they would be; with ``params.seed`` alone, as a
    call without the others) and each prompt that does not given ``n`` error completions naming the cause
    (:func:`window_overflow`), so the episode loop ends that episode instead of the engine failing the batch."""
    overflow = [window_overflow(len(ids), params.max_new_tokens, window) for ids in encoded]
    if not any(overflow):
        return None
    fits = [i for i, why in enumerate(overflow) if why is None]
    chosen = [seeds[i] for i in fits] if seeds is not None else None
    sampled = iter(sampler.sample([encoded[i] for i in fits], n, params, seeds=chosen) if fits else [])
    return [
        [Completion(text=why, finish_reason="error", prompt_token_ids=list(encoded[i])) for _ in range(n)]
        if why
        else next(sampled)
        for i, why in enumerate(overflow)
    ]


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text before the earliest stop string (the stop string itself is dropped, as in the OpenAI API)."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]
