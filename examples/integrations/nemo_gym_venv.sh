#!/usr/bin/env bash
# Builds a Python 3.13 virtual environment holding NeMo-Gym 0.7.0, so tests/integrations/test_nemo_rows.py can
# validate the rows pivotgym exports against NeMo-Gym's own pydantic models (its package needs Python >= 3.13,
# pivotgym runs on 3.11). Usage: bash examples/integrations/nemo_gym_venv.sh [DEST]
#
# What is and is not faithful: the nemo-gym wheel declares Requires-Python >=3.13.14; a 3.13.0 interpreter is
# accepted with --ignore-requires-python. Its ~40 declared dependencies are not all installed (--no-deps):
# only those that importing the resources server's row models pulls in (the list below), at whatever
# versions pip picks, except openai, pinned as nemo-gym pins it (its Responses types are what rows are
# validated against). About 850 MB.
set -euo pipefail
DEST=${1:-${PIVOTGYM_CACHE:-$HOME/.cache/pivotgym}/nemo-gym-0.7}
PY=${PYTHON313:-}
if [ -z "$PY" ]; then
  if python3.13 -c "" 2>/dev/null; then PY=python3.13
  else PY=$(ls -d "$HOME"/.pyenv/versions/3.13*/bin/python3.13 2>/dev/null | tail -1 || true); fi
fi
[ -n "$PY" ] || { echo "no python3.13 found: set PYTHON313=/path/to/python3.13" >&2; exit 1; }
"$PY" -m venv "$DEST"
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
"$DEST/bin/pip" download -q --no-deps nemo-gym==0.7.0 --python-version 3.13.14 --only-binary :all: -d "$WHEELS"
"$DEST/bin/pip" install -q --no-deps --ignore-requires-python "$WHEELS"/nemo_gym-0.7.0-py3-none-any.whl
"$DEST/bin/pip" install -q pydantic openai==2.44.0 fastapi uvicorn aiohttp orjson requests 'anyio>=4.15.1' rich \
  omegaconf itsdangerous httptools hydra-core 'ray>=2.58.0' yappi pydot pandas scipy wandb
"$DEST/bin/python" -c "import resources_servers.single_step_tool_use_with_argument_comparison.app"
echo "NeMo-Gym 0.7.0 row models importable: PIVOTGYM_NEMO_GYM_PYTHON=$DEST/bin/python"
