"""A client for OpenAI-compatible ``/v1/completions`` servers (``vllm serve``, SGLang, TGI, ...).

Token in, token out: prompts are sent as token ids (chat messages are templated locally with the model's
tokenizer, or by the server's ``/tokenize`` endpoint when no tokenizer is at hand), and the sampled token
ids come back through vLLM's extensions (``return_token_ids``, or ``return_tokens_as_token_ids`` in the
logprobs). Only when a server returns neither are ids recovered by tokenising the text, with a warning:
those ids may differ from what the model produced, so such servers are fine for evaluation, not training.

Requests go one per prompt, several at once (``concurrency``); the server batches them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pivotgym.sampling.base import Prompt, SamplerError, SamplingParams, cut_at_stop, encode_prompt
from pivotgym.sampling.models import BUNDLED_MODELS, DEFAULT_MODEL
from pivotgym.types import Completion

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


class OpenAISampler:
    """Sample from an OpenAI-compatible server.

    ``model`` names the model for the server (``served_model`` overrides the name sent, e.g. when the server
    was started with ``--served-model-name``); ``base_url`` defaults to ``$OPENAI_BASE_URL`` or a local
    vLLM server; ``tokenizer`` is a tokenizer object or a model name/folder to load one from (default: the
    model itself when it is a bundled alias or a local folder).
    """

    backend = "openai"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        api_key: str | None = None,
        tokenizer: Any = None,
        served_model: str | None = None,
        timeout: float = 600.0,
        concurrency: int = 16,
    ) -> None:
        import httpx

        self.model_name = str(model)
        self.served_model = served_model or self.model_name
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        key = api_key or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(timeout=timeout, headers=headers)
        self.concurrency = max(1, concurrency)
        if tokenizer is None and (self.model_name in BUNDLED_MODELS or Path(self.model_name).is_dir()):
            tokenizer = self.model_name
        if isinstance(tokenizer, (str, os.PathLike)):
            from pivotgym.sampling.models import load_tokenizer

            tokenizer = load_tokenizer(str(tokenizer))
        self.tokenizer = tokenizer
        self._warned = False

    def describe(self) -> dict[str, Any]:
        return {"model": self.model_name, "revision": None, "backend": self.backend, "base_url": self.base_url}

    def close(self) -> None:
        self.client.close()

    # -------------------------------------------------------------- http
    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise SamplerError(
                f"cannot reach {url}: {exc}; start a server (e.g. `vllm serve MODEL`) or pass "
                f"--base-url / $OPENAI_BASE_URL"
            ) from exc
        if response.status_code >= 400:
            raise SamplerError(f"{url} answered HTTP {response.status_code}: {response.text[:500]}")
        try:
            return response.json()
        except ValueError as exc:
            raise SamplerError(f"{url} did not answer JSON: {response.text[:200]!r}") from exc

    def _root_url(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    # ---------------------------------------------------------- encoding
    def encode(self, prompt: Prompt | str) -> list[int]:
        """Prompt token ids: locally with the tokenizer, else through the server's ``/tokenize`` (vLLM)."""
        if self.tokenizer is not None:
            return encode_prompt(self.tokenizer, prompt)
        items = prompt if isinstance(prompt, str) else list(prompt)
        if not isinstance(items, str) and items and all(isinstance(x, int) for x in items):
            return [x for x in items if isinstance(x, int)]
        body: dict[str, Any] = {"model": self.served_model}
        if isinstance(items, str):
            body.update(prompt=items, add_special_tokens=False)
        else:
            body.update(messages=items, add_generation_prompt=True)
        data = self._post(self._root_url() + "/tokenize", body)
        return [int(t) for t in data["tokens"]]

    # ---------------------------------------------------------- sampling
    def request_body(self, prompt_ids: list[int], n: int, params: SamplingParams) -> dict[str, Any]:
        """The ``/v1/completions`` request for one prompt (vLLM's extra fields are ignored by others)."""
        body: dict[str, Any] = {
            "model": self.served_model,
            "prompt": prompt_ids,
            "n": n,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    def sample(
        self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        params = params or SamplingParams()
        encoded = [self.encode(p) for p in prompts]
        url = self.base_url + "/completions"

        def one(ids: list[int]) -> list[Completion]:
            data = self._post(url, self.request_body(ids, n, params))
            choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
            if len(choices) != n:
                raise SamplerError(f"{url} returned {len(choices)} choices for n={n}")
            return [self._completion(choice, ids, params) for choice in choices]

        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(encoded)))) as pool:
            return list(pool.map(one, encoded))

    def _completion(self, choice: dict[str, Any], prompt_ids: list[int], params: SamplingParams) -> Completion:
        text = choice.get("text") or ""
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        logprobs = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
        token_ids = choice.get("token_ids")
        if token_ids is None and tokens and all(str(t).startswith("token_id:") for t in tokens):
            token_ids = [int(str(t).split(":", 1)[1]) for t in tokens]
        if token_ids is None:
            token_ids = self._retokenise(text)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Completion(
            cut_at_stop(text, params.stop), [int(t) for t in token_ids], logprobs, finish, list(prompt_ids)
        )

    def _retokenise(self, text: str) -> list[int]:
        if not self._warned:
            warnings.warn(
                f"{self.base_url} returned no token ids; tokenising the returned text instead "
                "(may differ from the sampled tokens: do not train on these)",
                stacklevel=3,
            )
            self._warned = True
        if self.tokenizer is None:
            return []
        return encode_prompt(self.tokenizer, text)
