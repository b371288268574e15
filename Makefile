# dllm-bench — `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default; a GPU user passes e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: help setup sandbox-deps test test-fast lint demo bench reproduce-table clean-venv

help:  ## list targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m dllm_bench.lm_eval_plugin --install
	touch $(STAMP)

setup: $(STAMP) sandbox-deps  ## create .venv (if missing), install the project with dev extras, and bubblewrap

sandbox-deps:  ## bubblewrap for the code sandbox (docs/sandbox.md): apt-get as root, else the command to run
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	  else \
	    echo "make: the code sandbox needs bubblewrap; run: sudo apt-get install -y bubblewrap (then make setup again)" >&2; \
	    exit 1; \
	  fi; }

test: setup  ## run the whole test suite (what CI runs)
	$(PY) -m pytest -q tests

# The inner loop: unit tests of the engine, the models, the runner's checks and the adapters' key handling;
# no `slow` tests, none of the end-to-end folders (report, tiny, llada_v, the CLI runs).
FAST_TESTS ?= FAST_SELECTION

test-fast: setup  ## the inner loop: a fast subset of the suite (FAST_TESTS)
	$(PY) -m pytest -q -m "not slow and not exhaustive" $(FAST_TESTS)

lint: setup  ## ruff
	$(VENV)/bin/ruff check dllm_bench tests scripts

clean-venv:  ## remove the virtual environment
	rm -rf $(VENV)

demo: $(STAMP)  ## sweep rules x caches on the embedded tiny model; table, CSVs and Pareto plot under results/demo/
	$(PY) scripts/demo.py

bench: setup  ## decoding-engine benchmarks and the batch speed-up; CSVs under results/bench/
	$(PY) scripts/bench.py
	$(PY) scripts/bench_batch.py

reproduce-table: setup  ## build paper tables (TABLE=<name> for one); runs missing runs the machine can run
	$(PY) scripts/reproduce_table.py $(if $(TABLE),--table $(TABLE),--all)
