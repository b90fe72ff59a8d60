"""The Sampler protocol: prompts (chat messages or token ids) in, completions with token ids and logprobs out.

Contract: a backend keeps the prompt token ids it sampled from (``Completion.prompt_token_ids``) and the
generated ``token_ids`` exactly as produced, so training never re-tokenises generated text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Union, runtime_checkable

from pivotgym.types import Completion, Message

#: a prompt is a chat (list of message dicts; the backend applies the chat template) or token ids
Prompt = Union[Sequence[Message], Sequence[int]]


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

    def sample(self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None) -> list[list[Completion]]:
        ...

    def describe(self) -> dict[str, Any]:
        """``{"model", "revision", "backend"}``: what produced the samples (recorded in turn profiles)."""
        ...
