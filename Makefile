# Two commands set up a fresh machine: `make demo` (the main job) and `make test` (the test suite).
# Both build .venv from scratch when needed: torch's CPU wheel first, then pinned dependencies, the asset
# packages (model, data, solvers) without their dependencies, then the core and every plugin, editable.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed
PLUGINS := $(sort $(wildcard plugins/*))
TORCH  ?= torch==2.13.0

.PHONY: install demo check-envs test lint bench clean system-deps

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

# bubblewrap is the default sandbox; installed from Debian when missing (needs root or sudo).
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap >/dev/null; } \
	  || echo "warning: could not install bubblewrap; sandboxed code will not run (apt-get install bubblewrap)"

# The main job: base eval -> expert data -> SFT -> profile + select pivots -> PivotRL -> E2E RL -> OOD evals,
# on the bundled SmolLM2 model and bundled data, offline; writes runs/quickstart/report.md (resumable).
demo: $(STAMP)
	$(VENV)/bin/pivotgym plugins
	$(VENV)/bin/pivotgym experiment examples/configs/quickstart.yaml
	@echo "report: runs/quickstart/report.md"

# Contract checks of every registered environment and its verifier.
check-envs: $(STAMP)
	$(VENV)/bin/pivotgym check all

test: $(STAMP)
	$(PY) -m pytest -q

# ruff (lint + format check) and mypy on the package; CI runs this before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
