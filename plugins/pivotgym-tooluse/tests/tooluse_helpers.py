"""Shared helpers for the tool-use plugin tests (imported by path-unique name to avoid clashes)."""

from __future__ import annotations

from pivotgym.types import Trajectory, Turn
from pivotgym.verify import VerifyContext
from pivotgym_tooluse.env import MultiTurnEnv, SingleTurnEnv
from pivotgym_tooluse.plugin import SINGLE_TURN


def single_env(env_id: str = "tooluse/bfcl-simple-v0") -> SingleTurnEnv:
    category, ood, _ = SINGLE_TURN[env_id]
    env = SingleTurnEnv(category=category, ood=ood)
    env.env_id = env_id
    return env


def multi_env(**kwargs) -> MultiTurnEnv:
    env = MultiTurnEnv(**kwargs)
    env.env_id = "tooluse/bfcl-multi-turn-v0"
    return env


def expert(env, task_id: str) -> Trajectory:
    task = env.get_task(task_id)
    for traj in env.expert_trajectories(task.split):
        if traj.task_id == task_id:
            return traj
    raise KeyError(task_id)


def context(env_factory, turn: Turn) -> VerifyContext:
    return VerifyContext(turn, env_factory=env_factory)
