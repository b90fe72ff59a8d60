"""Helpers shared by the core tests (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from pivotgym import AgentEnv, InvalidAction, StepOutcome, Task
from pivotgym.types import Trajectory, TurnProfile, message


class CounterEnv(AgentEnv):
    """Reach a target by actions `add K` (K in 1..3); `sleep` hangs, `crash` raises (to test the guards)."""

    splits = ("train", "test")
    max_turns = 6

    def load_tasks(self, split):
        base = 0 if split == "train" else 100
        return [Task(f"{split}-{i}", split, {"target": 3 + i}) for i in range(base, base + 4)]

    def initial_messages(self, task):
        self.value = 0
        return [message("user", f"Reach {task.data['target']} with `add K`, K in 1..3.")]

    def apply_action(self, action):
        if action.strip() == "sleep":
            time.sleep(5)
        if action.strip() == "crash":
            raise RuntimeError("domain bug")
        m = re.fullmatch(r"\s*add\s+([123])\s*", action)
        if not m:
            raise InvalidAction("write `add K` with K in 1..3")
        self.value += int(m.group(1))
        done = self.value >= self.task.data["target"]
        reward = 1.0 if self.value == self.task.data["target"] else 0.0
        return StepOutcome([message("user", f"value={self.value}")], reward=reward if done else 0.0, terminated=done)

    def expert_actions(self, task):
        left, out = task.data["target"], []
        while left:
            k = min(3, left)
            out.append(message("assistant", f"add {k}"))
            left -= k
        return out


def cli_env(site: Path, **extra: str) -> dict[str, str]:
    """Environment for a `pivotgym` subprocess that sees the test plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def mixed_profiles(trajectories: list[Trajectory]) -> list[TurnProfile]:
    """One profile row per turn of ``trajectories`` with mixed rewards (K=2: one credited sample, one wrong), as a
    pivot set or an export needs them."""
    return [
        TurnProfile(
            trajectory_id=t.id,
            turn=turn.turn,
            env_id=t.env_id,
            task_id=t.task_id,
            k=2,
            rewards=[1.0, 0.0],
            mean=0.5,
            var=0.25,
            reasons=["equivalent", "wrong"],
            reference={},
            verifier={},
            key=f"{t.id}:{turn.turn}",
        )
        for t in trajectories
        for turn in t.turns()
    ]


def make_tiny_llama(seed: int = 0, vocab: int = 97):
    """A random-init Llama built from a config (no tokenizer, ~20k parameters), for log-probability and
    update tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return LlamaForCausalLM(config)


def venv_python(variable: str, cached: str) -> Path | None:
    """The interpreter of a side venv: ``$variable``, or ``<pivotgym cache>/<cached>/bin/python`` (what its make
    target builds); None when there is neither."""
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("PIVOTGYM_CACHE") or Path.home() / ".cache" / "pivotgym")
    default = cache / cached / "bin" / "python"
    return default if default.exists() else None


def nemo_gym_python() -> Path | None:
    """NeMo-Gym 0.7's interpreter (it needs Python >= 3.13; pivotgym runs on 3.11): ``make nemo-gym``'s venv."""
    return venv_python("PIVOTGYM_NEMO_GYM_PYTHON", "nemo-gym-0.7")


def openenv_python() -> Path | None:
    """OpenEnv 0.10's client interpreter: ``make openenv``'s venv."""
    return venv_python("PIVOTGYM_OPENENV_PYTHON", "openenv-0.10")


def expert_episode(env_id: str, split: str = "test") -> tuple[str, list[str]]:
    """The first task of ``split`` with an expert solution, and the expert's action texts."""
    from pivotgym.registry import make

    env = make(env_id)
    try:
        for task in env.tasks(split):
            actions = env.expert_actions(task)
            if actions:
                return task.id, [env.render_action(a) for a in actions]
    finally:
        env.close()
    raise AssertionError(f"{env_id}: no expert solution in {split}")
