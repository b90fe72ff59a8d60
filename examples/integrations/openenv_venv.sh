#!/usr/bin/env bash
# Builds a virtual environment holding OpenEnv 0.10.0's client, so tests/serve/test_openenv.py can play
# episodes on `pivotgym serve` with OpenEnv's own GenericEnvClient. Usage: bash examples/integrations/openenv_venv.sh [DEST]
#
# What is and is not faithful: the openenv wheel is installed whole (--no-deps), with the packages importing its
# client pulls in (fastapi, fastmcp 3.x as openenv pins it, websockets, pydantic, requests, httpx, pyyaml) at
# whatever versions pip picks; its other declared dependencies (gradio, huggingface_hub, openai, rich, typer ...)
# serve its server, CLI and hub integration, not the client, and are left out. About 150 MB.
set -euo pipefail
DEST=${1:-${PIVOTGYM_CACHE:-$HOME/.cache/pivotgym}/openenv-0.10}
PY=${PYTHON:-python3}
"$PY" -m venv "$DEST"
"$DEST/bin/pip" install -q --no-deps openenv==0.10.0
"$DEST/bin/pip" install -q fastapi 'fastmcp>=3.0.0,<4.0.0' 'websockets>=15.0.1' pydantic requests httpx pyyaml \
  packaging typing_extensions
"$DEST/bin/python" -c "from openenv.core.generic_client import GenericEnvClient"
echo "OpenEnv 0.10.0 client importable: PIVOTGYM_OPENENV_PYTHON=$DEST/bin/python"
