"""A client for OpenAI-compatible ``/v1/completions`` servers (``vllm serve``, SGLang, TGI, ...).

Token in, token out: prompts are sent as token ids (chat messages are templated locally with the model's
tokenizer, or by the server's ``/tokenize`` endpoint when no tokenizer is at hand), and the sampled token
ids come back through vLLM's extensions (``return_token_ids``, or ``return_tokens_as_token_ids`` in the
logprobs). Only when a server returns neither are ids recovered by tokenising the text, with a warning:
those ids may differ from what the model produced, so such servers are fine for evaluation, not training.

Requests go one per prompt, several at once (``concurrency``); the server batches them. Seeded calls
(``sample(..., seeds=[...])``, what :func:`~pivotgym.sampling.base.sample_seeded` sends) go the same way, one
seed per request. Greedy requests ask for one completion and repeat it (vLLM refuses greedy with ``n > 1``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from pivotgym.sampling.base import (
    Prompt,
    SamplerError,
    SamplingParams,
    check_prompt_seeds,
    cut_at_stop,
    encode_prompt,
    finish_reason,
    sample_within_window,
)
from pivotgym.sampling.models import BUNDLED_MODELS, DEFAULT_MODEL, model_dir
from pivotgym.types import Completion

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


class OpenAISampler:
    """Sample from an OpenAI-compatible server.

    ``model`` names the model; the name sent to the server is ``served_model`` when given, else ``model`` or,
    when the server does not serve that name, the one it serves for the same model (a server started on the
    bundled model's folder without ``--served-model-name`` serves it under the folder's path; read once from
    ``/v1/models``). ``base_url`` defaults to ``$OPENAI_BASE_URL`` or a local vLLM server on port 8000;
    ``tokenizer`` is a tokenizer object or a model name/folder to load one from (default: the model itself
    when it is a bundled alias or a local folder). ``dtype`` is what the server runs (the API does not say),
    recorded by :meth:`describe` only. ``warm_prefixes``: when some prompts of a call extend others, the longest
    of each such family is first sent alone for one token, so a server's prefix cache (vLLM's) holds the shared
    history before the real requests arrive side by side.
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
        dtype: str | None = None,
        warm_prefixes: bool = True,
    ) -> None:
        import httpx

        self.model_name = str(model)
        self.served_model = served_model
        self.dtype = dtype
        self.warm_prefixes = warm_prefixes
        self._served_models: list[str] | None = None
        #: served name -> the server's context window, where ``/v1/models`` says it (vLLM's ``max_model_len``)
        self._windows: dict[str, int] = {}
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

    @classmethod
    def for_server(cls, server: Any, **kwargs: Any) -> OpenAISampler:
        """A client of a :class:`~pivotgym.sampling.vllm.VLLMServer`: its model, URL and dtype."""
        kwargs.setdefault("dtype", server.engine_kwargs.get("dtype"))
        return cls(server.model, base_url=server.base_url, **kwargs)

    def describe(self) -> dict[str, Any]:
        """``{"model", "revision", "backend", "base_url", "dtype"}`` (``dtype`` as given; None when unknown)."""
        return {
            "model": self.model_name,
            "revision": None,
            "backend": self.backend,
            "base_url": self.base_url,
            "dtype": self.dtype,
        }

    def close(self) -> None:
        self.client.close()

    # -------------------------------------------------------------- http
    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise SamplerError(
                f"cannot reach {url}: {exc}; start a server (e.g. `python -m vllm.entrypoints.openai.api_server "
                "--model PATH --served-model-name NAME`, or pivotgym.sampling.vllm.VLLMServer) or point the "
                "sampler at one (base_url=... or $OPENAI_BASE_URL)"
            ) from exc
        if response.status_code >= 400:
            hint = ""
            if response.status_code == 404 and self._served_models:
                hint = (
                    f" (the server serves {self._served_models}; pass served_model=NAME, or start the server "
                    f"with --served-model-name {self.model_name})"
                )
            raise SamplerError(f"{url} answered HTTP {response.status_code}: {response.text[:500]}{hint}")
        try:
            return response.json()
        except ValueError as exc:
            raise SamplerError(f"{url} did not answer JSON: {response.text[:200]!r}") from exc

    def served_name(self) -> str:
        """The model name sent to the server (see the class docstring); asks ``/v1/models`` at most once."""
        if self.served_model is None:
            self.served_model = self._discover_served_name()
        return self.served_model

    def _discover_served_name(self) -> str:
        import httpx

        try:
            response = self.client.get(self.base_url + "/models")
            listed = response.json()["data"] if response.status_code == 200 else []
            served = [str(m["id"]) for m in listed]
            self._windows = {str(m["id"]): int(m["max_model_len"]) for m in listed if m.get("max_model_len")}
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            served = []  # not an API that lists models: send the name as given
        self._served_models = served
        if not served or self.model_name in served:
            return self.model_name
        wanted = _model_folder(self.model_name)
        for name in served:
            if wanted is not None and _model_folder(name) == wanted:
                return name
        return self.model_name

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
        body: dict[str, Any] = {"model": self.served_name()}
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
            "model": self.served_name(),
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

    #: takes ``seeds=`` (one per prompt, one request each): see :func:`~pivotgym.sampling.base.sample_seeded`
    prompt_seeds = True

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        params: SamplingParams | None = None,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        """``n`` completions per prompt, one request per prompt, up to ``concurrency`` requests at once;
        ``seeds`` (one per prompt) overrides ``params.seed`` prompt by prompt."""
        from pivotgym.sampling.vllm import repeat_greedy

        params = params or SamplingParams()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        encoded = [self.encode(p) for p in prompts]
        served = self.served_name()  # first: it reads /v1/models, windows included
        answered = sample_within_window(self, encoded, n, params, seeds, self._windows.get(served))
        if answered is not None:  # the server's window, where /v1/models says it: a 400 would fail the call
            return answered
        if seeds is not None:
            check_prompt_seeds(seeds, len(encoded))
            per_prompt = [replace(params, seed=int(s)) for s in seeds]
        else:
            per_prompt = [params] * len(encoded)
        asked = 1 if params.temperature == 0 else n
        url = self.base_url + "/completions"
        self.served_name()  # once, before the threads
        workers = min(self.concurrency, max(1, len(encoded)))
        if self.warm_prefixes:
            from pivotgym.sampling.vllm import shared_prefix_hosts

            warm = SamplingParams(temperature=0.0, max_new_tokens=1)
            hosts = shared_prefix_hosts(encoded)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(lambda h: self._post(url, self.request_body(encoded[h], 1, warm)), hosts))

        def one(ids: list[int], prompt_params: SamplingParams) -> list[Completion]:
            data = self._post(url, self.request_body(ids, asked, prompt_params))
            choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
            if len(choices) != asked:
                raise SamplerError(f"{url} returned {len(choices)} choices for n={asked}")
            return repeat_greedy([self._completion(choice, ids, prompt_params) for choice in choices], n)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, encoded, per_prompt))

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
        finish = finish_reason(choice.get("finish_reason"))
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


def _model_folder(name: str) -> str | None:
    """The folder a model name stands for (a bundled alias: its converted folder; a local folder: itself),
    so that an alias and its folder's path name the same model; None for any other name."""
    path = model_dir(name) if name in BUNDLED_MODELS else Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else None
