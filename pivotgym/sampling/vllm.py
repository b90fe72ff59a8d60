"""In-process vLLM backend (optional extra ``pip install pivotgym[vllm]``; needs a GPU).

vLLM is imported only when a :class:`VLLMSampler` is built, so the rest of pivotgym works without it.
vLLM shares prompt prefixes itself (prefix caching and ``n`` samples per request), returns the sampled
token ids and, with ``logprobs=0``, the logprob of each sampled token under the model's raw distribution:
the same quantities :class:`~pivotgym.sampling.hf.HFSampler` returns.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pivotgym.sampling.base import Prompt, SamplerError, SamplingParams, check_prompt_seeds, encode_prompt
from pivotgym.sampling.models import DEFAULT_MODEL, resolve_model
from pivotgym.types import Completion


def import_vllm() -> Any:
    """``import vllm`` with an error that says how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise SamplerError(
            "the 'vllm' sampler needs vLLM, which is not installed: `pip install 'pivotgym[vllm]'` on a machine "
            "with a CUDA GPU, or use `--sampler hf` (transformers) or `--sampler openai` (a running server)"
        ) from exc
    return vllm


class VLLMSampler:
    """Sample with an in-process ``vllm.LLM`` built from a model alias, local folder or hub id.

    ``llm_kwargs`` go to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``, ``max_model_len``,
    ``enable_prefix_caching``, ``tensor_parallel_size``).
    """

    backend = "vllm"

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        tokenizer: str | None = None,
        dtype: str = "auto",
        seed: int = 0,
        **llm_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        self.model_name = str(model)
        path = resolve_model(self.model_name)
        llm_kwargs.setdefault("enable_prefix_caching", True)
        self.llm = vllm.LLM(model=path, tokenizer=tokenizer or path, dtype=dtype, seed=seed, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._vllm = vllm

    def describe(self) -> dict[str, Any]:
        from pivotgym.sampling.hf import _revision

        return {
            "model": self.model_name,
            "revision": _revision(self.model_name),
            "backend": self.backend,
            "vllm": getattr(self._vllm, "__version__", None),
        }

    def encode(self, prompt: Prompt | str) -> list[int]:
        return encode_prompt(self.tokenizer, prompt)

    def sampling_params(self, n: int, params: SamplingParams) -> Any:
        """The ``vllm.SamplingParams`` equivalent of ours (logprob of each sampled token requested)."""
        return self._vllm.SamplingParams(
            n=n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            seed=params.seed,
            logprobs=0,
        )

    #: takes ``seeds=`` (one per prompt): vLLM accepts one ``SamplingParams`` per request
    prompt_seeds = True

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        params: SamplingParams | None = None,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        params = params or SamplingParams()
        encoded = [self.encode(p) for p in prompts]
        if seeds is not None:
            check_prompt_seeds(seeds, len(encoded))
            per_request: Any = [self.sampling_params(n, replace(params, seed=int(s))) for s in seeds]
        else:
            per_request = self.sampling_params(n, params)
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in encoded], per_request, use_tqdm=len(encoded) > 1
        )
        results = []
        for ids, output in zip(encoded, outputs):
            group = []
            for choice in output.outputs:
                token_ids = [int(t) for t in choice.token_ids]
                logprobs = [float(step[t].logprob) for step, t in zip(choice.logprobs or [], token_ids)]
                finish = "length" if choice.finish_reason == "length" else "stop"
                group.append(Completion(choice.text, token_ids, logprobs, finish, list(ids)))
            results.append(group)
        return results
