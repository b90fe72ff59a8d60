"""Fixtures of the experiment tests: a tiny random model on disk and a miniature experiment config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=2)
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def mini_config(model: Path, **changes: Any) -> dict[str, Any]:
    """The smallest experiment that runs every stage but the ablations (a few seconds on a tiny model):
    the arith test domain, RL from the SFT model, continued SFT matched to PivotRL's steps."""
    config: dict[str, Any] = {
        "name": "mini",
        "env": "arith/chain-v0",
        "model": str(model),
        "seeds": [0],
        "train_tasks": 2,
        "ood": ["general/navigate-v0"],
        "executor": "serial",
        "eval": {"limit": 1, "max_new_tokens": 2, "batch_size": 4},
        "curve": {"tasks": 1, "every": 1, "max_turns": 2},
        "profile": {"k": 2, "max_new_tokens": 2},
        "select": {"min_var": -1.0, "max_mean": 1.1},  # admit every turn: a gibberish model has no pivots
        "sft": {"steps": 1, "trajectories_per_step": 2, "progress": False},
        "pivot": {
            "steps": 2,
            "group_size": 2,
            "pivots_per_step": 1,
            "max_new_tokens": 2,
            "eval_pivots": 1,
            "eval_samples": 1,
            "progress": False,
        },
        "e2e": {
            "steps": 1,
            "group_size": 2,
            "tasks_per_step": 1,
            "max_new_tokens": 2,
            "max_turns": 1,
            "eval_tasks": 1,
            "eval_samples": 1,
            "progress": False,
        },
        "ablations": [],
        "rl_init": "sft",
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


@pytest.fixture()
def mini_experiment(tiny_model_dir: Path) -> Callable[..., Path]:
    """``mini_experiment(path, **changes)`` writes :func:`mini_config` (sections merged with ``changes``) to
    ``path`` and returns it."""

    def write(path: Path, **changes: Any) -> Path:
        path.write_text(yaml.safe_dump(mini_config(tiny_model_dir, **changes)), encoding="utf-8")
        return path

    return write
