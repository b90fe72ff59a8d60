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

import contextlib
import os
import random
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from pivotgym.sampling.base import (
    Prompt,
    SamplingParams,
    check_prompt_seeds,
    cut_at_stop,
    encode_prompt,
    sample_within_window,
)
from pivotgym.sampling.logprobs import positions_from_mask, token_logprobs
from pivotgym.sampling.models import BUNDLED_MODELS, DEFAULT_MODEL, cast_parameters, load_model_and_tokenizer
from pivotgym.types import Completion, content_hash

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class HFSampler:
    """Sample from a transformers causal LM (a name/path, or an in-memory model such as a policy in training).

    ``max_batch_size`` bounds the number of sequences decoded together (prompts x n); prompts are grouped
    so each group's ``len(group) * n`` fits (a single prompt with a larger n still runs as one group).
    ``cache_implementation``: ``"dynamic"`` (default on CPU: finished rows leave the cache) or ``"static"``
    (default on CUDA: fixed shapes, decode step compiled with CUDA graphs when ``compile``, default on CUDA).

    Inside :meth:`reuse_prefixes` (the episode loop opens it for a run of episodes) the key/value rows of the
    prompts prefilled are kept, up to ``prefix_cache_tokens`` tokens (least recently used dropped first), and a
    later prompt that extends a kept one - an episode's next turn: its history plus the reply and the env's
    answer - prefills only its new tokens. The weights must not change inside the block (the kept rows are the
    old weights'); leaving it drops every kept row.

    ``autocast_dtype`` runs the model under ``torch.autocast`` in that dtype while sampling and scoring, leaving
    the weights as they are: a trainer's sampler of the fp32 policy it trains in bf16 mixed precision samples
    in the precision it trains in (``dtype`` instead casts the weights: for a saved model only).
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
        cache_implementation: str | None = None,
        compile: bool | None = None,
        sync_every: int = 8,
        prefix_cache_tokens: int = 32_768,
        autocast_dtype: torch.dtype | str | None = None,
    ) -> None:
        self.in_memory = not isinstance(model, (str, os.PathLike))
        if isinstance(model, (str, os.PathLike)):
            self.model_name = str(model)
            self.model, loaded_tokenizer = load_model_and_tokenizer(self.model_name, device=device, dtype=dtype)
            tokenizer = tokenizer or loaded_tokenizer
        else:
            if tokenizer is None:
                raise ValueError(
                    "HFSampler(model=<in-memory model>) needs tokenizer=...; "
                    "pass the tokenizer the model was trained with"
                )
            self.model = model
            if device is not None:
                self.model.to(device)  # type: ignore[arg-type] # transformers' stub of .to() names a model
            if dtype is not None:  # parameters only: buffers such as the rotary inv_freq stay as loading leaves them
                cast_parameters(self.model, getattr(torch, dtype) if isinstance(dtype, str) else dtype)
            config = getattr(model, "config", None)
            self.model_name = getattr(config, "_name_or_path", "") or "in-memory"
        self.tokenizer = tokenizer
        self.max_batch_size = max(1, int(max_batch_size))
        self.progress = progress
        self.pad_id = _pad_id(tokenizer)
        self.eos_ids = _eos_ids(self.model, tokenizer)
        on_cuda = self.device.type == "cuda"
        if cache_implementation not in (None, "dynamic", "static"):
            raise ValueError(f"cache_implementation must be 'dynamic' or 'static', got {cache_implementation!r}")
        self.cache_implementation = cache_implementation or ("static" if on_cuda else "dynamic")
        self.compile = bool(on_cuda and self.cache_implementation == "static") if compile is None else compile
        self.sync_every = max(1, int(sync_every))
        self._compiled: Any = None
        self._static_capable: bool | None = None
        self._static_cache: tuple[Any, Any] | None = None
        self.prefix_cache_tokens = max(0, int(prefix_cache_tokens))
        #: prompt ids -> per-layer (keys, values) of that prompt, ``[heads, len, dim]``; None outside reuse_prefixes
        self._prefixes: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None = None
        self._spent_prefixes: set[tuple[int, ...]] = set()
        #: prompt tokens whose key/value rows were reused, and prompt tokens prefilled, inside reuse_prefixes
        self.prefix_stats = {"reused_tokens": 0, "prefilled_tokens": 0}
        self.autocast_dtype = getattr(torch, autocast_dtype) if isinstance(autocast_dtype, str) else autocast_dtype

    def precision(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` in ``autocast_dtype`` on the model's device, or nothing when it is unset."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    # ------------------------------------------------------------------ info
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> dict[str, Any]:
        """``{"model", "revision", "backend", "dtype", "device"}``; ``revision`` pins the weights where it can
        (the asset package version for a bundled model, a hash of config + weight files for a folder; None
        for an in-memory model, whose weights may be changing)."""
        return {
            "model": self.model_name,
            "revision": None if self.in_memory else _revision(self.model_name),
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
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True))

    # -------------------------------------------------------------- weights
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``(name, tensor)`` pairs into the model's parameters of those names, in place and cast to their
        dtype (how a trainer keeps a sampler that holds its own copy of the policy in step). In place, so a
        compiled decoding step stays valid; the kept prompt rows of :meth:`reuse_prefixes` were the old weights'
        and are dropped. A name the model does not have is a ``KeyError``: the copy would silently go stale."""
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in weights:
                if name not in params:
                    raise KeyError(f"the sampler's model has no parameter {name!r}; its weights would go stale")
                params[name].copy_(tensor)
        if self._prefixes is not None:
            self._prefixes.clear()
            self._spent_prefixes.clear()

    # -------------------------------------------------------------- prefix reuse
    @contextlib.contextmanager
    def reuse_prefixes(self) -> Iterator[None]:
        """Keep prompts' key/value rows across calls inside the block, so a prompt extending a kept one
        prefills only its new tokens (see the class docstring). Same samples as without (the kept rows are what
        the prefill would recompute); nested blocks share the outer one's rows."""
        if self._prefixes is not None or not self.prefix_cache_tokens:
            yield
            return
        self._prefixes = OrderedDict()
        try:
            yield
        finally:
            self._prefixes = None
            self._spent_prefixes.clear()

    def _kept_prefix(self, prompt: list[int]) -> tuple[tuple[int, ...] | None, int]:
        """The longest kept prompt that ``prompt`` extends, and how many of its rows serve (at most all but
        ``prompt``'s last token, whose logits the prefill must produce)."""
        best: tuple[int, ...] | None = None
        for key in self._prefixes or ():
            if len(key) <= len(prompt) and (best is None or len(key) > len(best)) and tuple(prompt[: len(key)]) == key:
                best = key
        if best is None:
            return None, 0
        return best, min(len(best), len(prompt) - 1)

    def _prefill_reusing(self, prompts: list[list[int]], n: int) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """:meth:`_prefill` that takes each prompt's first tokens from the longest kept prompt it extends and
        runs only the rest, then keeps every prompt's rows.

        Row layout (``K`` = most reused, ``R`` = most run): kept rows right-aligned in ``[0, K)``, the tokens
        run right-aligned in ``[K, K + R)``, padding masked out wherever a row is shorter; positions follow
        each row's real tokens, so the logits and the cache are the plain prefill's."""
        from pivotgym.sampling.kv_cache import growing_cache

        assert self._prefixes is not None
        hits = [self._kept_prefix(p) for p in prompts]
        reused = [k for _, k in hits]
        run = [len(p) - k for p, k in zip(prompts, reused)]
        batch, width_k, width_r = len(prompts), max(reused), max(run)
        device = self.device
        config = getattr(self.model, "config", None)
        if width_k:
            layers = []
            template = self._prefixes[next(key for key, k in hits if k and key is not None)]
            for layer, (keys0, values0) in enumerate(template):
                k = keys0.new_zeros((batch, keys0.shape[0], width_k, keys0.shape[2]))
                v = values0.new_zeros((batch, values0.shape[0], width_k, values0.shape[2]))
                for row, (key, count) in enumerate(hits):
                    if count and key is not None:
                        kept_k, kept_v = self._prefixes[key][layer]
                        k[row, :, width_k - count :] = kept_k[:, :count]
                        v[row, :, width_k - count :] = kept_v[:, :count]
                layers.append((k, v))
            cache = growing_cache(config, layers)
            for key, count in hits:
                if count and key is not None:
                    self._prefixes.move_to_end(key)
                    self._spent_prefixes.add(key)
        else:
            cache = growing_cache(config)
        input_ids = torch.full((batch, width_r), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width_k + width_r), dtype=torch.long)
        position = torch.zeros((batch, width_r), dtype=torch.long)
        for row, (ids, count, todo) in enumerate(zip(prompts, reused, run)):
            input_ids[row, width_r - todo :] = torch.as_tensor(ids[count:], dtype=torch.long)
            attention[row, width_k - count : width_k] = 1
            attention[row, width_k + width_r - todo :] = 1
            position[row, width_r - todo :] = torch.arange(count, len(ids))
        input_ids, attention, position = input_ids.to(device), attention.to(device), position.to(device)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=position,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.prefix_stats["reused_tokens"] += sum(reused)
        self.prefix_stats["prefilled_tokens"] += sum(run)
        self._keep_prefixes(prompts, reused, run, out.past_key_values, width_k, width_r)
        return _repeat_rows(out, attention, n)

    def _keep_prefixes(
        self, prompts: list[list[int]], reused: list[int], run: list[int], cache: Any, width_k: int, width_r: int
    ) -> None:
        """Keep each prompt's rows of ``cache`` (laid out as in :meth:`_prefill_reusing`), dropping the least
        recently used kept prompts beyond ``prefix_cache_tokens``."""
        assert self._prefixes is not None
        end = width_k + width_r
        for row, (ids, count, todo) in enumerate(zip(prompts, reused, run)):
            if len(ids) > self.prefix_cache_tokens:
                continue
            rows = []
            for layer in cache.layers:
                parts_k = [layer.keys[row, :, width_k - count : width_k], layer.keys[row, :, end - todo : end]]
                parts_v = [layer.values[row, :, width_k - count : width_k], layer.values[row, :, end - todo : end]]
                rows.append((torch.cat(parts_k, dim=1), torch.cat(parts_v, dim=1)))
            self._prefixes[tuple(ids)] = rows
            self._prefixes.move_to_end(tuple(ids))
        total = sum(len(key) for key in self._prefixes)
        while total > self.prefix_cache_tokens and self._prefixes:
            key, _ = self._prefixes.popitem(last=False)
            total -= len(key)

    def _reusable(self) -> bool:
        """Whether prefix reuse applies now: inside :meth:`reuse_prefixes`, on a model whose cache is plain
        per-layer keys and values (not sliding-window or recurrent layers)."""
        if self._prefixes is None:
            return False
        config = getattr(self.model, "config", None)
        types = set(getattr(config, "layer_types", None) or [])
        if types:
            return types <= {"full_attention"}
        return not (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))

    # -------------------------------------------------------------- sampling
    #: takes ``seeds=`` (one seed per prompt) in :meth:`sample`; see :func:`~pivotgym.sampling.base.sample_seeded`
    prompt_seeds = True

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        params: SamplingParams | None = None,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order.

        With ``params.seed`` set, the j-th sample of the i-th prompt is reproducible whatever the batch size
        or device path (see :class:`GumbelNoise`); without it every call draws a fresh seed. ``seeds`` (one
        per prompt, overriding ``params.seed``) ties each prompt's samples to its own seed, so many prompts
        batch into one call and still draw exactly what they would alone."""
        from tqdm.auto import tqdm

        params = params or SamplingParams()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        encoded = [self.encode(p) for p in prompts]
        window = getattr(self.model.config, "max_position_embeddings", None)
        answered = sample_within_window(self, encoded, n, params, seeds, window)
        if answered is not None:  # a prompt past the window: error completions for it, the others sampled
            return answered
        if seeds is not None:
            check_prompt_seeds(seeds, len(encoded))
            noise = GumbelNoise.per_prompt([int(s) for s in seeds], n, self.device)
        else:
            seed = params.seed if params.seed is not None else random.SystemRandom().randrange(2**63)
            noise = GumbelNoise(int(seed), self.device)
        per_group = max(1, self.max_batch_size // n)
        static = self.cache_implementation == "static" and self._static_ok()
        hosts = [] if static or params.max_new_tokens <= 0 else prefix_hosts(encoded)
        results: list[list[Completion]] = [[] for _ in encoded]
        was_training = self.model.training
        self.model.eval()
        try:
            with (
                torch.no_grad(),
                self.precision(),
                tqdm(total=len(encoded), desc="sampling", unit="prompt", disable=not self.progress) as bar,
            ):
                for picked, group in self._groups(encoded, hosts, n, per_group, params, noise):
                    for i, completions in zip(picked, group):
                        results[i] = completions
                    bar.update(len(picked))
        finally:
            self.model.train(was_training)
            if self._prefixes is not None:  # a kept prompt that was extended will not be asked for again
                for key in self._spent_prefixes:
                    self._prefixes.pop(key, None)
                self._spent_prefixes.clear()
        return results

    def _groups(
        self,
        encoded: list[list[int]],
        hosts: list[int],
        n: int,
        per_group: int,
        params: SamplingParams,
        noise: GumbelNoise,
    ) -> Any:
        """Yield ``(prompt indices, their completions)`` group by group.

        Prompts of similar length share a batch: a left-padded prefill costs the longest prompt's length for
        every row. When some prompts are token prefixes of others (the states of one trajectory: each turn's
        prompt begins with the previous one), only the longest of each family (its *host*) is prefilled, and
        every member's cache is cut from its host's. Noise is keyed by each prompt's global row, so the
        grouping does not change what is drawn."""

        def rows(picked: list[int]) -> GumbelNoise:
            return noise.select([i * n + j for i in picked for j in range(n)])

        if not any(h != i for i, h in enumerate(hosts)):  # nothing shared: plain length-sorted batches
            order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
            reuse = params.max_new_tokens > 0 and self._reusable()
            for start in range(0, len(order), per_group):
                picked = order[start : start + per_group]
                prompts = [encoded[i] for i in picked]
                prefill = self._prefill_reusing(prompts, n) if reuse else None
                yield picked, self._generate(prompts, n, params, rows(picked), prefill)
            return
        members: dict[int, list[int]] = {}
        for i, h in enumerate(hosts):
            members.setdefault(h, []).append(i)
        order = sorted(members, key=lambda h: len(encoded[h]))
        for start in range(0, len(order), per_group):
            batch = order[start : start + per_group]
            _, host_cache, host_mask = self._prefill([encoded[h] for h in batch], 1)
            offsets = {h: int((host_mask[r] == 0).sum()) for r, h in enumerate(batch)}
            row_of = {h: r for r, h in enumerate(batch)}
            family = sorted((i for h in batch for i in members[h]), key=lambda i: len(encoded[i]))
            for first in range(0, len(family), per_group):
                picked = family[first : first + per_group]
                prefill = self._prefill_from_hosts(
                    [encoded[i] for i in picked],
                    host_cache,
                    [row_of[hosts[i]] for i in picked],
                    [offsets[hosts[i]] for i in picked],
                    n,
                )
                yield picked, self._generate([encoded[i] for i in picked], n, params, rows(picked), prefill)
            del host_cache

    def _prefill_from_hosts(
        self, prompts: list[list[int]], host_cache: Any, host_rows: list[int], offsets: list[int], n: int
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """:meth:`_prefill` for prompts that are prefixes of host prompts already prefilled: each prompt's
        first ``len - 1`` tokens are copied from its host's cache row (left-padded to the group's width), and
        one forward of every prompt's last token gives its logits. Same outputs as :meth:`_prefill`, without
        recomputing the shared history."""
        from pivotgym.sampling.kv_cache import growing_cache

        batch, width = len(prompts), max(len(p) for p in prompts)
        past = width - 1
        layers = []
        for layer in host_cache.layers:
            keys, values = layer.keys, layer.values
            k = keys.new_zeros((batch, keys.shape[1], past, keys.shape[3]))
            v = values.new_zeros((batch, values.shape[1], past, values.shape[3]))
            for row, (ids, host, offset) in enumerate(zip(prompts, host_rows, offsets)):
                copied = len(ids) - 1
                if copied:
                    k[row, :, past - copied :] = keys[host, :, offset : offset + copied]
                    v[row, :, past - copied :] = values[host, :, offset : offset + copied]
            layers.append((k, v))
        cache = growing_cache(getattr(self.model, "config", None), layers)
        attention = torch.zeros((batch, width), dtype=torch.long, device=self.device)
        for row, ids in enumerate(prompts):
            attention[row, width - len(ids) :] = 1
        last = torch.as_tensor([[ids[-1]] for ids in prompts], dtype=torch.long, device=self.device)
        position = torch.as_tensor([[len(ids) - 1] for ids in prompts], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=last, attention_mask=attention, position_ids=position, past_key_values=cache, use_cache=True
        )
        return _repeat_rows(out, attention, n)

    def _generate(
        self,
        prompts: list[list[int]],
        n: int,
        params: SamplingParams,
        noise: GumbelNoise,
        prefill: tuple[torch.Tensor, Any, torch.Tensor] | None = None,
    ) -> list[list[Completion]]:
        if params.max_new_tokens <= 0:
            return [[Completion("", [], [], "length", list(p)) for _ in range(n)] for p in prompts]
        logits, cache, attention = prefill if prefill is not None else self._prefill(prompts, n)
        stop = [s for s in params.stop if s]
        if self.cache_implementation == "static" and self._static_ok():
            tokens, logprobs, finish = self._decode_static(logits, cache, attention, params, noise, stop)
        else:
            tokens, logprobs, finish = self._decode_dynamic(logits, cache, attention, params, noise, stop)
        completions: list[list[Completion]] = []
        for p, ids in enumerate(prompts):
            group = []
            for row in range(p * n, (p + 1) * n):
                text = cut_at_stop(self.decode(tokens[row]), stop)
                group.append(Completion(text, tokens[row], logprobs[row], finish[row] or "length", list(ids)))
            completions.append(group)
        return completions

    def _static_ok(self) -> bool:
        if self._static_capable is None:
            self._static_capable = _static_capable(self.model)
        return self._static_capable

    def _prefill(self, prompts: list[list[int]], n: int) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """One forward over the left-padded prompts; returns the last logits, the cache and the attention
        mask, each repeated ``n`` times along the batch axis (the prompt itself is never repeated)."""
        from pivotgym.sampling.kv_cache import growing_cache

        batch, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.as_tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        cache = growing_cache(getattr(self.model, "config", None))
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions_from_mask(attention),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return _repeat_rows(out, attention, n)

    def _decode_dynamic(
        self,
        logits: torch.Tensor,
        cache: Any,
        attention: torch.Tensor,
        params: SamplingParams,
        noise: GumbelNoise,
        stop: list[str],
    ) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
        """Decode on a DynamicCache, dropping each row from the cache as soon as it finishes (CPU default)."""
        rows = logits.shape[0]
        next_position = attention.sum(dim=1)  # each row's next rotary position
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        finish: list[str | None] = [None] * rows
        live = list(range(rows))  # group row of each cache row
        live_index = torch.arange(rows, device=self.device)
        for step in range(params.max_new_tokens):
            chosen = _choose(logits, params, noise, step, live_index)
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
                index = torch.as_tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                chosen, attention, next_position = chosen[index], attention[index], next_position[index]
                live = [live[i] for i in keep]
                live_index = live_index[index]
            attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
            out = self.model(
                input_ids=chosen.unsqueeze(1),
                attention_mask=attention,
                position_ids=next_position.unsqueeze(1),
                past_key_values=cache,
                use_cache=True,
            )
            next_position = next_position + 1
            logits = out.logits[:, -1, :].float()
        return tokens, logprobs, finish

    def _decode_static(
        self,
        logits: torch.Tensor,
        cache: Any,
        attention: torch.Tensor,
        params: SamplingParams,
        noise: GumbelNoise,
        stop: list[str],
    ) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
        """Decode on a StaticCache with fixed shapes and device-side bookkeeping (CUDA default).

        Every tensor the step reads has a fixed shape, so the step can be compiled (``torch.compile`` with
        CUDA graphs) and replayed with one launch; finished rows keep running until all are done (their
        extra tokens are discarded). The host syncs once every ``sync_every`` steps, or every step when
        stop strings must be checked.
        """
        from transformers import StaticCache

        device, rows, width = self.device, logits.shape[0], attention.shape[1]
        steps = params.max_new_tokens
        total = -(-(width + steps) // 128) * 128  # bucketed: fewer distinct shapes to compile
        # reuse the cache of the previous call with the same shape: a compiled step keeps its CUDA graph
        # (static tensor addresses); stale entries past `width` are masked out and overwritten as we go
        shape = (rows, total, logits.device, next(self.model.parameters()).dtype)
        if self._static_cache is not None and self._static_cache[0] == shape:
            static = self._static_cache[1]
        else:
            self._static_cache = None  # free the old one before allocating
            static = StaticCache(config=self.model.config, max_cache_len=total)
            for layer, source in zip(static.layers, cache.layers):
                layer.lazy_initialization(source.keys, source.values)  # type: ignore[union-attr] # Llama layers have it
            self._static_cache = (shape, static)
        for layer, source in zip(static.layers, cache.layers):
            layer.keys[:, :, :width].copy_(source.keys)
            layer.values[:, :, :width].copy_(source.values)
            layer.cumulative_length.fill_(width)
        del cache
        mask = torch.zeros((rows, total), dtype=torch.long, device=device)
        mask[:, :width] = attention
        position = attention.sum(dim=1, keepdim=True)
        eos = torch.as_tensor(sorted(self.eos_ids) or [-1], device=device)
        token_buf = torch.full((rows, steps), self.pad_id, dtype=torch.long, device=device)
        logprob_buf = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        lengths = torch.zeros(rows, dtype=torch.long, device=device)
        stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        forward = self._step_forward()
        for step in range(steps):
            chosen = _choose(logits, params, noise, step, None)
            token_buf[:, step] = chosen
            logprob_buf[:, step] = logits.gather(1, chosen.unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=-1)
            lengths += (~stopped).long()
            stopped |= torch.isin(chosen, eos)
            if stop:
                lengths_host, stopped_host = lengths.tolist(), stopped.tolist()
                ids = token_buf[:, : step + 1].tolist()
                hits = [
                    r
                    for r in range(rows)
                    if not stopped_host[r] and _hits_stop(self.decode(ids[r][: lengths_host[r]]), stop)
                ]
                if hits:
                    stopped[torch.as_tensor(hits, device=device)] = True
            if step + 1 == steps or ((stop or (step + 1) % self.sync_every == 0) and bool(stopped.all())):
                break
            mask[:, width + step] = 1
            cache_position = torch.full((1,), width + step, dtype=torch.long, device=device)
            logits = forward(chosen.unsqueeze(1), mask, position, static, cache_position).float()
            position = position + 1
        lengths_host, stopped_host = lengths.tolist(), stopped.tolist()
        token_rows, logprob_rows = token_buf.tolist(), logprob_buf.tolist()
        tokens = [token_rows[r][: lengths_host[r]] for r in range(rows)]
        logprobs = [logprob_rows[r][: lengths_host[r]] for r in range(rows)]
        finish: list[str | None] = ["stop" if stopped_host[r] else "length" for r in range(rows)]
        return tokens, logprobs, finish

    def _step_forward(self) -> Any:
        """One decode step -> last logits ``[rows, vocab]``; compiled (CUDA graphs) when ``self.compile``."""
        model = self.model

        def step(
            input_ids: torch.Tensor,
            mask: torch.Tensor,
            position: torch.Tensor,
            cache: Any,
            cache_position: torch.Tensor,
        ) -> torch.Tensor:
            out = model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=position,
                past_key_values=cache,
                cache_position=cache_position,
                use_cache=True,
            )
            return out.logits[:, -1, :]

        if not self.compile:
            return step
        if self._compiled is None:
            self._compiled = torch.compile(step, mode="reduce-overhead", fullgraph=False, dynamic=False)
        compiled = self._compiled

        def guarded(
            input_ids: torch.Tensor,
            mask: torch.Tensor,
            position: torch.Tensor,
            cache: Any,
            cache_position: torch.Tensor,
        ) -> torch.Tensor:
            try:
                return compiled(input_ids, mask, position, cache, cache_position).clone()
            except Exception as exc:
                warnings.warn(f"torch.compile of the decode step failed ({exc!r}); continuing without it", stacklevel=2)
                self.compile = False
                for layer in cache.layers:  # the failed attempt may have advanced the write position
                    layer.cumulative_length.fill_(int(cache_position[0]))
                return step(input_ids, mask, position, cache, cache_position)

        return guarded

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
            with torch.no_grad(), self.precision():
                for start in range(0, len(prompt_ids), size):
                    chunk_p, chunk_c = prompt_ids[start : start + size], completion_ids[start : start + size]
                    values, _ = token_logprobs(self.model, chunk_p, chunk_c, pad_id=self.pad_id)
                    rows = values.cpu().tolist()
                    scores.extend(row[: len(c)] for row, c in zip(rows, chunk_c))
        finally:
            self.model.train(was_training)
        return scores


# ---------------------------------------------------------------------- helpers
def _choose(
    logits: torch.Tensor, params: SamplingParams, noise: GumbelNoise, step: int, rows: torch.Tensor | None
) -> torch.Tensor:
    """Next token per row: greedy at temperature 0, else temperature / top-k / top-p sampling done as
    argmax(filtered scores + Gumbel noise), which draws from ``softmax(filtered scores)`` exactly."""
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
    return (scores + noise.gumbel(step, scores.shape[-1], rows)).argmax(dim=-1)


_MASK32 = 0xFFFFFFFF


def _fmix32(x: int) -> int:
    """murmur3's 32-bit finaliser on a Python int (exact)."""
    x &= _MASK32
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & _MASK32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)


def _seed_mix(seed: int) -> int:
    """A 64-bit seed folded into 32 well-mixed bits."""
    return _fmix32(_fmix32(seed & _MASK32) ^ ((seed >> 32) & _MASK32))


def _int32(value: int) -> int:
    """The signed 32-bit integer with the same bits as ``value mod 2**32``."""
    value &= _MASK32
    return value - (1 << 32) if value >> 31 else value


def _fmix32_tensor(x: torch.Tensor) -> torch.Tensor:
    """:func:`_fmix32` on an int32 tensor, in place: int32 multiplication wraps modulo ``2**32``, and each
    right shift is masked to its low bits, making the sign-extending shift of a signed type a logical one.
    Bit for bit the unsigned hash; int32 rather than int64 holding 32-bit values halves the memory traffic and
    needs no emulated multiplication: a ``[16, 49152]`` draw (every vocabulary entry, every decode step) is
    3-4x faster on a CPU (``benchmarks/decoding.py``)."""
    x ^= (x >> 16) & 0xFFFF
    x.mul_(_int32(0x85EBCA6B))
    x ^= (x >> 13) & 0x7FFFF
    x.mul_(_int32(0xC2B2AE35))
    x ^= (x >> 16) & 0xFFFF
    return x


class GumbelNoise:
    """Counter-based Gumbel noise: the value for (seed, row, step, token) is a hash of those four numbers.

    So the j-th sample of the i-th prompt of a call draws the same noise whatever the batch grouping, the
    cache implementation, or which other rows already finished: a seed reproduces samples exactly, and the
    static (CUDA) and dynamic (CPU) decode paths agree. It is pure tensor arithmetic, so it runs inside a
    decode loop on any device without host round trips.
    """

    def __init__(self, seed: int, device: torch.device, keys: torch.Tensor | None = None) -> None:
        self.seed, self.device = seed, device
        self._seed_mix = _seed_mix(seed)
        self.keys = keys
        self._columns: dict[int, torch.Tensor] = {}
        self._row_keys: list[int] | None = None

    @classmethod
    def per_prompt(cls, seeds: Sequence[int], n: int, device: torch.device) -> GumbelNoise:
        """A stream whose row ``i * n + j`` (sample j of prompt i) is keyed by ``(seeds[i], j)`` alone, so a
        prompt's samples do not depend on which other prompts share the call."""
        noise = cls(0, device)
        noise._row_keys = [_fmix32(_seed_mix(seed) ^ _fmix32(j + 0x9E3779B9)) for seed in seeds for j in range(n)]
        return noise

    def rows(self, first: int, count: int) -> GumbelNoise:
        """The same stream, restricted to global rows ``first .. first+count-1`` (one prompt group)."""
        return self.select(range(first, first + count))

    def select(self, rows: Sequence[int]) -> GumbelNoise:
        """The same stream, restricted to the given global rows in that order (a group of prompts that need
        not be adjacent in the call, e.g. prompts grouped by length)."""
        if self._row_keys is not None:
            hashed = [self._row_keys[r] for r in rows]
        else:
            hashed = [_fmix32(r + 0x9E3779B9) for r in rows]
        keys = torch.as_tensor([_int32(h) for h in hashed], dtype=torch.int32, device=self.device)
        child = GumbelNoise(self.seed, self.device, keys)
        child._seed_mix = self._seed_mix
        child._columns = self._columns
        return child

    def gumbel(self, step: int, vocab: int, rows: torch.Tensor | None) -> torch.Tensor:
        """``[rows, vocab]`` standard Gumbel noise for decode ``step`` (``rows`` indexes the group's rows)."""
        if self.keys is None:
            raise RuntimeError("GumbelNoise.rows(...) selects the rows before drawing")
        columns = self._columns.get(vocab)
        if columns is None:
            columns = torch.arange(vocab, dtype=torch.int32, device=self.device).mul_(_int32(0x9E3779B1))
            self._columns[vocab] = columns
        keys = self.keys if rows is None else self.keys[rows]
        step_mix = _int32(_fmix32(self._seed_mix ^ ((step * 0x27D4EB2F) & _MASK32)))
        x = _fmix32_tensor((keys ^ step_mix).unsqueeze(1) + columns.unsqueeze(0))  # int32: the sum wraps
        x ^= step_mix
        x = _fmix32_tensor(x)
        uniform = ((x >> 8) & 0xFFFFFF).float().add_(0.5).mul_(1.0 / (1 << 24))  # in (0, 1), 24 bits
        return uniform.log_().neg_().log_().neg_()


def _static_capable(model: Any) -> bool:
    """Whether the static decode path applies: a plain full-attention cache layout (e.g. Llama, Qwen2);
    sliding-window or hybrid models keep the dynamic path."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    config = getattr(model, "config", None)
    if config is None:
        return False
    try:
        probe = StaticCache(config=config, max_cache_len=8)
    except Exception:
        return False
    return all(type(layer) is StaticLayer for layer in probe.layers)


def _hits_stop(text: str, stop: list[str]) -> bool:
    return any(s in text for s in stop)


def _repeat_rows(out: Any, attention: torch.Tensor, n: int) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """A prefill's last logits, cache and attention mask, each repeated ``n`` times along the batch axis (the
    ``n`` samples of a prompt share its prefill)."""
    logits, cache = out.logits[:, -1, :].float(), out.past_key_values
    if n > 1:
        cache.batch_repeat_interleave(n)
        logits = logits.repeat_interleave(n, dim=0)
        attention = attention.repeat_interleave(n, dim=0)
    return logits, cache, attention


def prefix_hosts(prompts: Sequence[Sequence[int]]) -> list[int]:
    """For each prompt, the index of a prompt of the call that starts with all of its tokens and is the
    longest such (itself when no other does): the one whose prefill can serve it.

    In lexicographic order a prompt that is a prefix of another sorts just before its extensions, and every
    prompt between them shares that prefix; so walking the sorted order backwards, a prompt's host is its
    successor's host exactly when the successor starts with it. O(P log P) comparisons."""
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    hosts = list(range(len(prompts)))
    for k in range(len(order) - 2, -1, -1):
        i, after = order[k], order[k + 1]
        size = len(prompts[i])
        if len(prompts[after]) >= size and list(prompts[after][:size]) == list(prompts[i]):
            hosts[i] = hosts[after]
    return hosts


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
    """A stable identity for the weights behind ``name`` (used in cache keys and the profiler's seeds).

    For a folder it hashes the contents of its config and weight files, so the same weights written again
    (a rerun of the same training, a copy on another machine) get the same revision, and other weights never
    do. File timestamps are not part of it: they would give every rerun new sampling seeds."""
    if name in BUNDLED_MODELS:
        return BUNDLED_MODELS[name].requirement
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith((".json", ".safetensors", ".bin")))
        return content_hash([(f, _file_digest(os.path.join(path, f))) for f in files])[:16]
    return None


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_digest(path: str) -> str:
    """sha256 of a file's bytes, memoised per (path, size, mtime) so a process hashes each file once."""
    import hashlib

    stat = os.stat(path)
    memo = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if memo not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
        _DIGESTS[memo] = digest.hexdigest()
    return _DIGESTS[memo]
