# Two commands for a fresh machine: `make demo` and `make test`. Both create/reuse .venv and install what they need.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
# CPU build of torch where no NVIDIA GPU is present. On a Linux machine whose pip would fetch the CUDA build, add
# TORCH_INDEX=--index-url=https://download.pytorch.org/whl/cpu
TORCH_CPU   ?= torch==2.13.0
TORCH_INDEX ?=
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: venv demo demo-fast test test-fast lab sync-notebooks execute-notebooks clean

venv: $(STAMP)

$(STAMP): pyproject.toml requirements-nodeps.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(PIP) install -q "torch>=2.6"; \
	else \
	  $(PIP) install -q $(TORCH_CPU) $(TORCH_INDEX); \
	fi
	$(PIP) install -q --no-deps -r requirements-nodeps.txt
	$(PIP) install -q -e ".[dev]"
	touch $@

## base → SFT → RL on held-out TextWorld cooking games with the embedded model (12-20 min on 2 CPU cores, measured)
demo: $(STAMP)
	$(VENV)/bin/agentrl demo --out runs/demo

## the same pipeline with a tiny budget (≈ 3 min)
demo-fast: $(STAMP)
	$(VENV)/bin/agentrl demo --fast --out runs/demo-fast

## unit + integration tests and the notebooks under nbval in fast mode
test: $(STAMP)
	AGENTRL_FAST=1 $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) tests notebooks

## unit tests only (no embedded model, no notebooks)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

## notebooks are written as MyST Markdown (notebooks/*.md); this writes the paired .ipynb (outputs kept)
sync-notebooks: $(STAMP)
	$(VENV)/bin/jupytext --sync notebooks/*.md

## re-execute every notebook in full mode and keep the outputs (nbval compares them; see each notebook's wall time)
execute-notebooks: sync-notebooks
	for nb in notebooks/*.ipynb; do AGENTRL_FAST=0 $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.timeout=3000 $$nb || exit 1; done

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf runs .pytest_cache
