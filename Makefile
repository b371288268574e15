# dllm-bench — `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default; a GPU user passes e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: help setup sandbox-deps test test-fast test-cpu-capabilities lint demo bench reproduce-table frontier clean-venv

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

# The inner loop: unit tests of the engine's rules, schedules and config, the runner's checks and store, the
# adapters' key handling and the task scorers; no `slow` tests, no equivalence or end-to-end suites (caches
# against references, benchmarks, CLI runs, tiny training, LLaDA-V): `make test` runs those.
FAST_TESTS ?= tests/test_import_graph.py \
	tests/decoding/test_config.py \
	tests/decoding/test_confidence.py \
	tests/decoding/test_schedules.py \
	tests/decoding/test_selectors.py \
	tests/decoding/test_spec.py \
	tests/decoding/test_defaults_agree.py \
	tests/runner/test_validate.py \
	tests/runner/test_threads.py \
	tests/runner/test_config_schema.py \
	tests/runner/test_run_spec.py \
	tests/runner/test_store.py \
	tests/runner/test_completions.py \
	tests/tasks/test_hub_offline.py \
	tests/tasks/test_lm_eval_model_args.py \
	tests/tasks/test_gsm8k.py \
	tests/tasks/test_math_tasks.py \
	tests/tasks/test_registry_and_data.py \
	tests/report/test_aggregate.py

test-fast: setup  ## the inner loop: a fast subset of the suite (FAST_TESTS)
	$(PY) -m pytest -q -m "not slow and not exhaustive" $(FAST_TESTS)

# golden decodes and bit-for-bit claims: they must hold whatever SIMD width ATen's kernels use (issue 31)
CAPABILITY_TESTS ?= tests/decoding/test_speed_equivalence.py tests/decoding/test_verify_selection.py \
	tests/decoding/test_cache_reference.py tests/decoding/test_head_window.py tests/decoding/test_confidence.py \
	tests/models/test_linear.py tests/models/test_numerics.py tests/models/test_published_logits.py \
	tests/models/test_block_published_logits.py tests/models/test_block_attention.py \
	tests/decoding/test_bf16_tier.py::test_dream_bf16_decode_equals_the_published_loop \
	tests/decoding/test_elastic_cache.py::test_a_threshold_that_always_fires_is_the_uncached_decode_bit_for_bit \
	tests/decoding/test_elastic_cache.py::test_a_row_of_a_batch_decodes_as_it_does_alone \
	tests/decoding/test_rules_published.py tests/decoding/test_rules_klass_pc.py tests/decoding/test_dkv_cache.py tests/decoding/test_dkv_greedy.py \
	tests/decoding/test_dpad.py tests/decoding/test_wino.py tests/decoding/test_sparse_dllm.py tests/decoding/test_d2cache.py

# SKIP_CAPABILITY: one already covered (.ci/run passes the CPU's own, which make test has just run)
SKIP_CAPABILITY ?=

test-cpu-capabilities: setup  ## the golden/bit-exactness tests under ATEN_CPU_CAPABILITY=default, avx2, avx512 (those this CPU has)
	@flags=" $$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "; \
	for cap in default avx2 avx512; do \
	  case $$cap in avx2) flag=avx2 ;; avx512) flag=avx512f ;; *) flag= ;; esac; \
	  if [ -n "$$flag" ] && [ "$${flags#* $$flag }" = "$$flags" ]; then echo "$$cap: skipped (no $$flag in /proc/cpuinfo)"; continue; fi; \
	  if [ "$$cap" = "$(SKIP_CAPABILITY)" ]; then echo "$$cap: skipped (SKIP_CAPABILITY)"; continue; fi; \
	  echo "ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap $(PY) -m pytest -q -p no:cacheprovider $(CAPABILITY_TESTS) || exit 1; \
	done

lint: setup  ## ruff
	$(VENV)/bin/ruff check dllm_bench hydra_plugins tests scripts

clean-venv:  ## remove the virtual environment
	rm -rf $(VENV)

demo: $(STAMP)  ## sweep rules x caches on the embedded tiny model; table, CSVs and Pareto plot under results/demo/
	$(PY) scripts/demo.py

bench: setup  ## decoding-engine benchmarks and the batch speed-up; CSVs under results/bench/
	$(PY) scripts/bench.py
	$(PY) scripts/bench_batch.py
	$(PY) scripts/bench_batch.py --caches none dual dkv dkv_greedy --batches 1 16
	$(PY) scripts/bench_moe.py

RULE ?= frechet
TASK ?= sudoku
MODEL ?= tiny_llada
# tiny-model settings; FRONTIER_ARGS="--grid" adds the even grid at the same budget, overrides go after them
FRONTIER_ARGS ?= batch_size=50 num_threads=1
frontier: $(STAMP)  ## searched accuracy-NFE front of RULE on TASK (MODEL): runs, table and plot under results/frontier/
	$(PY) scripts/frontier.py --rule $(RULE) --task $(TASK) --model $(MODEL) $(FRONTIER_ARGS)

reproduce-table: setup  ## build paper tables (TABLE=<name> for one); runs missing runs the machine can run
	$(PY) scripts/reproduce_table.py $(if $(TABLE),--table $(TABLE),--all)
