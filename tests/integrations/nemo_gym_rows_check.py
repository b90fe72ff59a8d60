"""Validate NeMo-Gym pivot rows with NeMo-Gym 0.7's own pydantic models; run with NeMo-Gym's interpreter.

Reads a JSONL file of rows (argv[1]) and prints one JSON line per row: ``{"ok": true}`` or ``{"ok": false,
"error": "..."}``. Each row is validated as the request of NeMo-Gym's
``single_step_tool_use_with_argument_comparison`` resources server (``responses_create_params`` as OpenAI
Responses create-params, ``expected_action`` as its message / function_call / function_call_batch union) and
as that server's ``TaskData``. This file imports only NeMo-Gym; pivotgym is never imported here.
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    from resources_servers.single_step_tool_use_with_argument_comparison.app import (
        SingleStepToolUseArgumentComparisonRunRequest as RunRequest,
    )
    from resources_servers.single_step_tool_use_with_argument_comparison.task_data import TaskData

    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            try:
                RunRequest.model_validate(row)
                TaskData.model_validate(row)
            except Exception as exc:
                print(json.dumps({"ok": False, "error": str(exc)[:2000]}))
            else:
                print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
