"""Trainers: PivotRL (GRPO on pivots), SFT and end-to-end multi-turn RL, sharing one loop.

Library use::

    from pivotgym.train import PivotConfig, PivotTrainer
    summary = PivotTrainer(PivotConfig(pivots="pivots.jsonl", trajectories="expert.jsonl")).fit()

Command line: ``pivotgym train {pivot,sft,e2e} --config cfg.yaml``. Heavy modules (torch, transformers)
are imported when a trainer is first used.
"""

from __future__ import annotations

from typing import Any

from pivotgym.train.config import (
    CONFIGS,
    ConfigError,
    E2EConfig,
    PivotConfig,
    RLConfig,
    SFTConfig,
    TrainConfig,
    load_config,
)

_TRAINERS = {
    "pivot": "pivotgym.train.pivot:PivotTrainer",
    "sft": "pivotgym.train.sft:SFTTrainer",
    "e2e": "pivotgym.train.e2e:E2ETrainer",
}


def trainer_class(kind: str) -> Any:
    """The trainer class for ``pivot``, ``sft`` or ``e2e``."""
    import importlib

    if kind not in _TRAINERS:
        raise ConfigError(f"unknown trainer {kind!r}; choose one of {sorted(_TRAINERS)}")
    module, _, attr = _TRAINERS[kind].partition(":")
    return getattr(importlib.import_module(module), attr)


def __getattr__(name: str) -> Any:
    lazy = {"PivotTrainer": "pivot", "SFTTrainer": "sft", "E2ETrainer": "e2e"}
    if name in lazy:
        return trainer_class(lazy[name])
    raise AttributeError(name)


__all__ = [
    "CONFIGS",
    "ConfigError",
    "E2EConfig",
    "E2ETrainer",
    "PivotConfig",
    "PivotTrainer",
    "RLConfig",
    "SFTConfig",
    "SFTTrainer",
    "TrainConfig",
    "load_config",
    "trainer_class",
]
