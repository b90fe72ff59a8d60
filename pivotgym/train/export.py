"""Save a trained policy as a plain Hugging Face model folder (``save_pretrained`` + tokenizer).

Training checkpoints (``checkpoints/step-N``) hold what *resuming* needs (optimizer state, RNG, a raw
state dict) and cannot be loaded by ``from_pretrained``. :func:`save_model` writes what *using* the model
needs: ``config.json``, safetensors weights, the generation config and the tokenizer, so
``pivotgym eval --model PATH``, ``pivotgym profile --model PATH`` and transformers load it directly (it is
the standard folder vLLM takes too).

A LoRA policy is saved **merged**: the adapter is folded into a copy of the base weights, so the folder is a
full model that needs neither peft nor the base model to load (the training model itself is left unmerged).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

#: the folder under a run's ``output_dir`` where the trainers save the final model
FINAL_MODEL_DIR = "final"
#: written last into a saved model folder: which step it holds (and that the folder is complete)
MODEL_INFO = "pivotgym-model.json"


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a peft (LoRA) wrapper."""
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def save_model(model: Any, tokenizer: Any, out_dir: str | Path, *, info: dict[str, Any] | None = None) -> Path:
    """Save ``model`` and ``tokenizer`` into ``out_dir`` as a loadable Hugging Face model folder.

    LoRA models are merged into a deep copy first (the caller's model keeps its adapter). The folder is
    written into a temporary sibling and renamed into place when complete, so a reader never sees a half
    written model and an older folder at ``out_dir`` is replaced whole. ``info`` (e.g. the step) is stored in
    ``pivotgym-model.json``. Returns ``out_dir``.
    """
    import json

    from pivotgym.sampling.models import build_folder

    out = Path(out_dir)
    plain = copy.deepcopy(model).merge_and_unload() if is_peft_model(model) else model

    def write(tmp: Path) -> None:
        plain.save_pretrained(str(tmp), safe_serialization=True)
        if getattr(plain, "generation_config", None) is not None:
            plain.generation_config.save_pretrained(str(tmp))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        (tmp / MODEL_INFO).write_text(json.dumps(info or {}, indent=2, default=str))

    build_folder(out, write)
    return out


__all__ = ["FINAL_MODEL_DIR", "MODEL_INFO", "is_peft_model", "save_model"]
