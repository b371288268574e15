# dllm-bench — `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default; a GPU user passes e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: help setup sandbox-deps test test-fast test-cpu-capabilities lint docs demo bench reproduce-table frontier clean-venv wheel-check

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

# Test workers (pytest-xdist): one per core, at most 4; a test file's tests stay on one worker (tests/conftest.py).
# TEST_JOBS=0 runs the suite in this process.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; [ $$n -lt 2 ] && n=0; echo $$n)
WORKERS = -n $(TEST_JOBS) --dist loadgroup
# Under test, idle OpenMP threads sleep instead of spinning: the workers' threads outnumber the cores, and spinning
# threads slowed a 2-thread test file 13x on a busy 2-core box (24.5 s -> 315 s). How threads wait changes no result.
test test-fast test-cpu-capabilities: export OMP_WAIT_POLICY ?= PASSIVE

test: setup  ## run the whole test suite (what CI runs), on TEST_JOBS workers
	$(PY) -m pytest -q $(WORKERS) tests

# The inner loop: the tests marked `fast` (unit tests of the engine's rules, schedules and config, the runner's checks
# and store, the adapters' key handling and the task scorers), none `slow`.
test-fast: setup  ## the inner loop: the tests marked fast (pyproject's markers)
	$(PY) -m pytest -q $(WORKERS) -m "fast and not slow and not exhaustive" tests

# Golden decodes and bit-for-bit claims, marked `golden` (tests/conftest.py: every test reading a golden of
# tests/fixtures/recorded_on.json; bit-equality claims between code paths in their files): they must hold whatever
# SIMD width ATen's kernels use (issue 31). SKIP_CAPABILITY: one already covered (.ci/run passes the CPU's own,
# which make test has just run).
SKIP_CAPABILITY ?=

test-cpu-capabilities: setup  ## the tests marked golden under ATEN_CPU_CAPABILITY=default, avx2, avx512 (those this CPU has)
	@flags=" $$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "; \
	for cap in default avx2 avx512; do \
	  case $$cap in avx2) flag=avx2 ;; avx512) flag=avx512f ;; *) flag= ;; esac; \
	  if [ -n "$$flag" ] && [ "$${flags#* $$flag }" = "$$flags" ]; then echo "$$cap: skipped (no $$flag in /proc/cpuinfo)"; continue; fi; \
	  if [ "$$cap" = "$(SKIP_CAPABILITY)" ]; then echo "$$cap: skipped (SKIP_CAPABILITY)"; continue; fi; \
	  echo "ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap $(PY) -m pytest -q -p no:cacheprovider $(WORKERS) -m "golden and not exhaustive" tests || exit 1; \
	done

lint: setup  ## ruff
	$(VENV)/bin/ruff check dllm_bench hydra_plugins tests scripts

docs: setup  ## regenerate the method tables in README.md and docs/*.md from the registries (scripts/method_tables.py)
	$(PY) scripts/method_tables.py

clean-venv:  ## remove the virtual environment
	rm -rf $(VENV)

demo: $(STAMP)  ## sweep rules x caches on the embedded tiny model; table, CSVs and Pareto plot under results/demo/
	$(PY) scripts/demo.py

bench: setup  ## decoding-engine benchmarks and the batch speed-up; CSVs under results/bench/
	$(PY) scripts/bench.py
	$(PY) scripts/bench_batch.py
	$(PY) scripts/bench_batch.py --caches none dual dkv dkv_greedy --batches 1 16
	$(PY) scripts/bench_moe.py
	$(PY) scripts/bench_block_cache.py
	$(PY) scripts/bench_compile.py
	$(PY) scripts/bench_commit_step.py

RULE ?= frechet
TASK ?= sudoku
MODEL ?= tiny_llada
# tiny-model settings; FRONTIER_ARGS="--grid" adds the even grid at the same budget, overrides go after them
FRONTIER_ARGS ?= batch_size=50 num_threads=1
frontier: $(STAMP)  ## searched accuracy-NFE front of RULE on TASK (MODEL): runs, table and plot under results/frontier_local/ (FRONTIER_ARGS="--out results/frontier" updates the committed ones)
	$(PY) scripts/frontier.py --rule $(RULE) --task $(TASK) --model $(MODEL) $(FRONTIER_ARGS)

# run-config overrides on make's command line (lower-case keys, as for dllm-bench: backend=sglang
# backend.url=http://host:30000 model.name_or_path=...) go to every cell of reproduce-table (its --set)
LOWER_START := $(addsuffix %,a b c d e f g h i j k l m n o p q r s t u v w x y z + ~)
CELL_OVERRIDES = $(strip $(foreach v,$(sort $(.VARIABLES)),$(if $(and $(filter command line,$(origin $(v))),$(filter $(LOWER_START),$(v))),'$(v)=$($(v))')))
reproduce-table: setup  ## build paper tables (TABLE=<name> for one; key=value overrides, e.g. backend=sglang backend.url=URL, go to every cell); runs missing runs the machine can run
	$(PY) scripts/reproduce_table.py $(if $(TABLE),--table $(TABLE),--all)$(if $(strip $(CELL_OVERRIDES)), --set $(CELL_OVERRIDES))

WHEEL_DIR ?= dist
wheel-check: $(STAMP)  ## build the wheel from the committed tree (into WHEEL_DIR), install it in a fresh venv, run dllm-bench and lm-eval's registry from outside the checkout
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git archive --format=tar HEAD | tar -x -C "$$tmp" && mkdir -p $(WHEEL_DIR) && \
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w "$(abspath $(WHEEL_DIR))" "$$tmp" && \
	wheel=$$(ls -t $(WHEEL_DIR)/dllm_bench-*.whl | head -1) && echo "built $$wheel" && \
	$(PYTHON) -m venv "$$tmp/venv" && "$$tmp/venv/bin/pip" install -q $(TORCH_SPEC) && \
	"$$tmp/venv/bin/pip" install -q "$$wheel" && cd "$$tmp" && rm -rf "$$tmp/dllm_bench" "$$tmp/conf" && \
	"$$tmp/venv/bin/dllm-bench" limit=2 batch_size=2 output_dir="$$tmp/out" && \
	"$$tmp/venv/bin/python" -c "from lm_eval.api.registry import get_model; print('lm-eval finds', get_model('dllm_bench'))"
