"""Run by NeMo-Gym 0.7's interpreter (Python >= 3.13), never imported by pivotgym's tests: drives a running
``pivotgym serve`` the way NeMo-Gym reaches a resources server, and checks every answer with NeMo-Gym's own code.

    echo '{"host": HOST, "port": PORT, "rows": [[task_index, verify_body], ...]}' | nemo-python nemo_gym_server_check.py

(no arguments: importing NeMo-Gym parses the command line as Hydra overrides). Printed: one JSON object of named
checks, each ``{"ok": bool, ...}``; exit 0 whatever they say (the pytest side reads them).

* NeMo-Gym's ``ServerClient``, configured with a resources server named ``pivotgym_resources`` at HOST:PORT, posts
  both ``/seed_session`` bodies, every ``/verify`` row, ``/aggregate_metrics`` and ``/close_session``, and gets
  ``/reverify_mode``; each answer is validated with NeMo-Gym's response model for that route.
* ``/aggregate_metrics``'s headline numbers are compared with NeMo-Gym's ``compute_aggregate_metrics`` on the
  same verify answers.
* ``check_resources_session_contract`` (NeMo-Gym's own conformance check) runs against a FastAPI app that
  forwards the two session routes to the server.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

import requests
from fastapi import FastAPI, Request, Response
from nemo_gym.base_resources_server import (
    BaseSeedSessionResponse,
    BaseVerifyResponse,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    ReverifyMode,
)
from nemo_gym.config_types import AggregateMetrics, BaseServerConfig
from nemo_gym.reward_profile import compute_aggregate_metrics
from nemo_gym.server_utils import ServerClient
from nemo_gym.testing.session_conformance import check_resources_session_contract
from omegaconf import OmegaConf

NAME = "pivotgym_resources"
HEADLINE = ("mean/reward", "coverage/measured_rollouts", "coverage/masked_rollouts", "coverage/measured_tasks")


async def drive(host: str, port: int, rows: list[list[Any]], results: dict[str, Any]) -> None:
    config = OmegaConf.create({NAME: {"resources_servers": {"pivotgym": {"host": host, "port": port}}}})
    client = ServerClient(head_server_config=BaseServerConfig(host=host, port=port), global_config_dict=config)

    async def post(path: str, body: Any) -> Any:
        answer = await client.post(server_name=NAME, url_path=path, json=body)
        assert answer.status == 200, f"{path}: {answer.status} {await answer.text()}"
        return await answer.json()

    episode = {"rollout_id": "ro-1", "attempt": 0}
    task = {"taskset": "pivotgym:tooluse", "task_id": "t-1"}
    seed = {"resources_session_id": "rs-1", "episode_id": episode, "task_id": task, "task_data": {"x": 1}}
    try:
        typed = ResourcesSeedSessionResponse.model_validate(await post("/seed_session", seed))
        legacy = BaseSeedSessionResponse.model_validate(await post("/seed_session", {"responses_create_params": {}}))
        closed = ResourcesCloseSessionResponse.model_validate(
            await post("/close_session", {"resources_session_id": "rs-1", "episode_id": episode})
        )
        assert typed.resources_session_id == closed.resources_session_id == "rs-1"
        results["sessions"] = {"ok": True, "legacy": legacy.model_dump()}
    except Exception:
        results["sessions"] = {"ok": False, "error": traceback.format_exc()[-1500:]}

    answers = []
    try:
        for rollout, (task, row) in enumerate(rows):
            answer = await post("/verify", row)
            BaseVerifyResponse.model_validate(answer)
            answers.append({"_ng_task_index": task, "_ng_rollout_index": rollout, **answer})
        results["verify"] = {
            "ok": True,
            "rewards": [a["reward"] for a in answers],
            "masked": [a["mask_sample"] for a in answers],
        }
    except Exception:
        results["verify"] = {"ok": False, "error": traceback.format_exc()[-1500:]}

    try:
        stripped = [
            {k: a[k] for k in ("_ng_task_index", "_ng_rollout_index", "reward", "mask_sample")} for a in answers
        ]
        ours = AggregateMetrics.model_validate(await post("/aggregate_metrics", {"verify_responses": stripped}))
        theirs = compute_aggregate_metrics(stripped)
        # every headline number NeMo-Gym reports (it leaves coverage out when nothing was masked) is ours too
        shared = [k for k in HEADLINE if k in theirs.key_metrics]
        differ = {k: (ours.key_metrics.get(k), theirs.key_metrics[k]) for k in shared}
        differ = {k: v for k, v in differ.items() if v[0] != v[1]}
        assert "mean/reward" in shared and not differ, f"our headline metrics differ from NeMo-Gym's: {differ}"
        empty = AggregateMetrics.model_validate(await post("/aggregate_metrics", {"verify_responses": []}))
        assert empty.agent_metrics == {}
        results["aggregate_metrics"] = {"ok": True, "key_metrics": ours.key_metrics}
    except Exception:
        results["aggregate_metrics"] = {"ok": False, "error": traceback.format_exc()[-1500:]}

    try:
        answer = await client.get(server_name=NAME, url_path="/reverify_mode")
        mode = ReverifyMode(await answer.json())
        results["reverify_mode"] = {"ok": mode is ReverifyMode.STATELESS, "mode": mode.value}
    except Exception:
        results["reverify_mode"] = {"ok": False, "error": traceback.format_exc()[-1500:]}


def forwarding_app(base: str) -> FastAPI:
    """A FastAPI app whose session routes are the running server's (NeMo-Gym's contract check takes an app)."""
    app = FastAPI()

    async def forward(request: Request) -> Response:
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        answer = requests.post(f"{base}{request.url.path}", data=await request.body(), headers=headers, timeout=30)
        return Response(answer.content, status_code=answer.status_code, media_type="application/json")

    app.post("/seed_session")(forward)
    app.post("/close_session")(forward)
    return app


def main() -> None:
    job = json.load(sys.stdin)
    host, port, rows = str(job["host"]), int(job["port"]), job["rows"]
    results: dict[str, Any] = {}
    asyncio.run(drive(host, port, rows, results))

    seed = ResourcesSeedSessionRequest.model_validate(
        {
            "resources_session_id": "contract-1",
            "episode_id": {"rollout_id": "ro-9", "attempt": 1},
            "task_id": {"taskset": "pivotgym:tooluse", "task_id": "t-9"},
            "task_data": {},
        }
    )
    try:
        check_resources_session_contract(forwarding_app(f"http://{host}:{port}"), seed, keeps_state=False)
        results["session_contract"] = {"ok": True}
    except Exception:
        results["session_contract"] = {"ok": False, "error": traceback.format_exc()[-1500:]}

    print(json.dumps(results))


if __name__ == "__main__":
    main()
