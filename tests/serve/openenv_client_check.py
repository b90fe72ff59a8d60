"""Run by the OpenEnv 0.10 venv's interpreter (``make openenv``), never imported by pivotgym's tests: plays
episodes on a running ``pivotgym serve`` with OpenEnv's own ``GenericEnvClient``.

    echo '{"base": "http://HOST:PORT/openenv/ENV_ID", "episodes": [{"task_id": ..., "actions": [...]}],
           "unknown": "http://HOST:PORT/openenv/NO/SUCH-v0"}' | python openenv_client_check.py

For each episode: reset to the task, step each action, read the state; printed: one JSON object with the
results (observations' last message, rewards, done flags, states) and the errors OpenEnv's client raised for a
malformed action and an unknown env.
"""

from __future__ import annotations

import json
import sys

from openenv.core.generic_client import GenericAction, GenericEnvClient


def main() -> None:
    job = json.load(sys.stdin)
    out: dict = {"episodes": []}
    with GenericEnvClient(base_url=job["base"]).sync() as env:
        for episode in job["episodes"]:
            first = env.reset(task_id=episode["task_id"])
            steps = []
            for action in episode["actions"]:
                result = env.step(GenericAction(message=action))
                steps.append({"reward": result.reward, "done": result.done, "metadata": result.metadata})
                if result.done:
                    break
            state = env.state()
            out["episodes"].append(
                {
                    "first_messages": len(first.observation["messages"]),
                    "first_done": first.done,
                    "steps": steps,
                    "state": state,
                }
            )
        try:
            env.step({"text": "not the action field"})
            out["bad_action"] = "accepted"
        except RuntimeError as exc:  # OpenEnv's client raises the server's error frame
            out["bad_action"] = str(exc)
    try:
        with GenericEnvClient(base_url=job["unknown"]).sync() as env:
            env.reset()
        out["unknown_env"] = "accepted"
    except Exception as exc:  # the refused connection, however the client reports it
        out["unknown_env"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
