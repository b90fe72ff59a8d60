"""Per-step overhead of AgentEnv against a bare gymnasium.Env doing the same work (an echo), in one run.

    python benchmarks/env_step.py [--steps 20000] [--json]

Prints microseconds per step for both and the ratio AgentEnv / bare. The overhead buys history keeping,
error observations for malformed actions, turn limits and the info dict.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
from _smoke import parse_args, smoke

from pivotgym import AgentEnv, StepOutcome, Task
from pivotgym.spaces import Messages, TextAction
from pivotgym.types import message


class EchoAgentEnv(AgentEnv):
    splits = ("train",)
    max_turns = 10**9

    def load_tasks(self, split):
        return [Task("echo", split)]

    def initial_messages(self, task):
        return [message("user", "say something")]

    def apply_action(self, action):
        return StepOutcome([message("user", action)])


class EchoBareEnv(gym.Env):
    def __init__(self):
        self.observation_space = Messages()
        self.action_space = TextAction()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [{"role": "user", "content": "say something"}], {}

    def step(self, action):
        return [{"role": "user", "content": action}], 0.0, False, False, {}


def per_step_us(env: gym.Env, steps: int, episode: int = 50) -> float:
    env.reset(seed=0)
    t0 = time.perf_counter()
    for i in range(steps):
        if i % episode == 0:
            env.reset(seed=0)
        env.step("hello world")
    return (time.perf_counter() - t0) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, steps=200)
    repeats = 1 if smoke() else 3
    per_step_us(EchoAgentEnv(), min(1000, args.steps))  # warm up
    bare = min(per_step_us(EchoBareEnv(), args.steps) for _ in range(repeats))
    agent = min(per_step_us(EchoAgentEnv(), args.steps) for _ in range(repeats))
    result = {
        "bare_us_per_step": round(bare, 2),
        "agent_env_us_per_step": round(agent, 2),
        "overhead_ratio": round(agent / bare, 2),
        "overhead_us": round(agent - bare, 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bare gymnasium.Env : {bare:8.2f} us/step")
        print(f"AgentEnv           : {agent:8.2f} us/step")
        print(f"ratio AgentEnv/bare: {agent / bare:8.2f}x  (+{agent - bare:.2f} us/step)")


if __name__ == "__main__":
    main()
