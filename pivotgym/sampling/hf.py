"""The transformers backend: n samples per prompt from ONE shared prefill.

``model.generate(num_return_sequences=n)`` expands the prompt n times before the prefill, so a K=16
profile pays 16 prefills of the same long history. Here the decode loop is our own: the prompts of a batch
are prefilled once (left-padded, positions taken from the attention mask), the KV cache is then repeated
n times along the batch axis, and decoding proceeds over the expanded batch. Finished rows are dropped from
the cache as they finish, so late steps only pay for live sequences.

Logprobs are those of the model's own distribution (``log_softmax`` of the raw logits, whatever the
sampling temperature or top-p), which is exactly what :meth:`HFSampler.score` returns for the same tokens;
trainers use them as the old-policy logprobs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from pivotgym.sampling.base import Prompt, SamplingParams, cut_at_stop, encode_prompt
from pivotgym.sampling.logprobs import positions_from_mask, token_logprobs
from pivotgym.sampling.models import DEFAULT_MODEL, BUNDLED_MODELS, load_model_and_tokenizer
from pivotgym.types import Completion, content_hash

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class HFSampler:
    """Sample from a transformers causal LM (a name/path, or an in-memory model such as a policy in training).

    ``max_batch_size`` bounds the number of sequences decoded together (prompts x n); prompts are grouped
    so each group's ``len(group) * n`` fits (a single prompt with a larger n still runs as one group).
    """

    backend = "hf"

    def __init__(
        self,
        model: str | os.PathLike[str] | PreTrainedModel = DEFAULT_MODEL,
        tokenizer: PreTrainedTokenizerBase | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        max_batch_size: int = 64,
        progress: bool = False,
    ) -> None:
        if isinstance(model, (str, os.PathLike)):
            self.model_name = str(model)
            self.model, loaded_tokenizer = load_model_and_tokenizer(self.model_name, device=device, dtype=dtype)
            tokenizer = tokenizer or loaded_tokenizer
        else:
            if tokenizer is None:
                raise ValueError("HFSampler(model=<in-memory model>) needs tokenizer=...; "
                                 "pass the tokenizer the model was trained with")
            self.model = model
            if device is not None or dtype is not None:
                self.model.to(device=device, dtype=dtype if not isinstance(dtype, str) else getattr(torch, dtype))
            config = getattr(model, "config", None)
            self.model_name = getattr(config, "_name_or_path", "") or "in-memory"
        self.tokenizer = tokenizer
        self.max_batch_size = max(1, int(max_batch_size))
        self.progress = progress
        self.pad_id = _pad_id(tokenizer)
        self.eos_ids = _eos_ids(self.model, tokenizer)

    # ------------------------------------------------------------------ info
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> dict[str, Any]:
        """``{"model", "revision", "backend", "dtype", "device"}``; ``revision`` pins the weights where it can
        (the asset package version for a bundled model, a hash of config + weight files for a folder)."""
        return {
            "model": self.model_name,
            "revision": _revision(self.model_name),
            "backend": self.backend,
            "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch."),
            "device": str(self.device),
        }

    # -------------------------------------------------------------- encoding
    def encode(self, prompt: Prompt | str) -> list[int]:
        """Token ids of a prompt (see :func:`~pivotgym.sampling.base.encode_prompt`): chat messages get the
        chat template with the generation prompt; token ids pass through; a string is tokenised as is."""
        return encode_prompt(self.tokenizer, prompt)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    # -------------------------------------------------------------- sampling
    def sample(
        self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order. Reproducible for a given ``params.seed``
        (same prompts, n, params and batch size)."""
        from tqdm.auto import tqdm

        params = params or SamplingParams()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        encoded = [self.encode(p) for p in prompts]
        seed = params.seed if params.seed is not None else random.SystemRandom().randrange(2**63)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(int(seed))
        per_group = max(1, self.max_batch_size // n)
        results: list[list[Completion]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), tqdm(total=len(encoded), desc="sampling", unit="prompt",
                                       disable=not self.progress) as bar:
                for start in range(0, len(encoded), per_group):
                    group = encoded[start:start + per_group]
                    results.extend(self._generate(group, n, params, generator))
                    bar.update(len(group))
        finally:
            self.model.train(was_training)
        return results

    def _generate(
        self, prompts: list[list[int]], n: int, params: SamplingParams, generator: torch.Generator
    ) -> list[list[Completion]]:
        from transformers import DynamicCache

        device, batch = self.device, len(prompts)
        rows = batch * n
        if params.max_new_tokens <= 0:
            return [[Completion("", [], [], "length", list(p)) for _ in range(n)] for p in prompts]

        # ---- one prefill for the whole group, left-padded
        width = max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.as_tensor(ids, dtype=torch.long)
            attention[row, width - len(ids):] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = positions_from_mask(attention)
        cache = DynamicCache(config=getattr(self.model, "config", None))
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :].float()
        cache = out.past_key_values

        # ---- share it: repeat the cache (not the prompt) n times
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            attention = attention.repeat_interleave(n, dim=0)
        next_position = attention.sum(dim=1)  # each row's next rotary position

        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        finish: list[str | None] = [None] * rows
        live = list(range(rows))  # global row of each cache row
        stop = [s for s in params.stop if s]
        for step in range(params.max_new_tokens):
            chosen = _choose(logits, params, generator)
            chosen_lp = logits.gather(1, chosen.unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=-1)
            for row, token, lp in zip(live, chosen.tolist(), chosen_lp.tolist()):
                tokens[row].append(token)
                logprobs[row].append(lp)
                if token in self.eos_ids or (stop and _hits_stop(self.decode(tokens[row]), stop)):
                    finish[row] = "stop"
                elif step + 1 == params.max_new_tokens:
                    finish[row] = "length"
            keep = [i for i, row in enumerate(live) if finish[row] is None]
            if not keep:
                break
            if len(keep) < len(live):  # drop finished rows from every tensor and the cache
                index = torch.as_tensor(keep, device=device)
                cache.batch_select_indices(index)
                chosen, attention, next_position = chosen[index], attention[index], next_position[index]
                live = [live[i] for i in keep]
            attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
            out = self.model(input_ids=chosen.unsqueeze(1), attention_mask=attention,
                             position_ids=next_position.unsqueeze(1), past_key_values=cache, use_cache=True)
            next_position = next_position + 1
            logits = out.logits[:, -1, :].float()

        completions: list[list[Completion]] = []
        for p, ids in enumerate(prompts):
            group = []
            for row in range(p * n, (p + 1) * n):
                text = cut_at_stop(self.decode(tokens[row]), stop)
                group.append(Completion(text, tokens[row], logprobs[row], finish[row] or "length", list(ids)))
            completions.append(group)
        return completions

    # --------------------------------------------------------------- scoring
    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Per-token logprobs of ``completion_ids`` after ``prompt_ids`` under the current weights."""
        return self.score_batch([prompt_ids], [completion_ids])[0]

    def score_batch(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        batch_size: int | None = None,
    ) -> list[list[float]]:
        """:meth:`score` for many pairs, batched (``batch_size`` pairs per forward, default ``max_batch_size``)."""
        size = batch_size or self.max_batch_size
        scores: list[list[float]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(prompt_ids), size):
                    chunk_p, chunk_c = prompt_ids[start:start + size], completion_ids[start:start + size]
                    values, _ = token_logprobs(self.model, chunk_p, chunk_c, pad_id=self.pad_id)
                    values = values.cpu().tolist()
                    scores.extend(row[:len(c)] for row, c in zip(values, chunk_c))
        finally:
            self.model.train(was_training)
        return scores


# ---------------------------------------------------------------------- helpers
def _choose(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """Next token per row: greedy at temperature 0, else temperature / top-k / top-p sampling."""
    if params.temperature <= 0:
        return logits.argmax(dim=-1)
    scores = logits / params.temperature
    if params.top_k and params.top_k > 0:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        beyond = probs.cumsum(dim=-1) - probs > params.top_p  # mass before this token already exceeds top_p
        ordered = ordered.masked_fill(beyond, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, ordered)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _hits_stop(text: str, stop: list[str]) -> bool:
    return any(s in text for s in stop)


def _pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Tokens that end a completion: the tokenizer's EOS plus the generation config's (may be a list)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos:
        ids.update(int(x) for x in config_eos)
    return ids


def _revision(name: str) -> str | None:
    """A stable identity for the weights behind ``name`` (used in cache keys)."""
    if name in BUNDLED_MODELS:
        return BUNDLED_MODELS[name].requirement
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith((".json", ".safetensors", ".bin")))
        stats = [(f, os.path.getsize(os.path.join(path, f)), int(os.path.getmtime(os.path.join(path, f))))
                 for f in files]
        return content_hash(stats)[:16]
    return None
