# poslab — `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline
export POSLAB_JOBS ?= 2

.DEFAULT_GOAL := help
.PHONY: help install run grid test test-fast test-exec lint format bench gpu-deps clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

install: $(VENV)/.installed ## create .venv: torch 2.13.0 (CPU) first if no torch is there, then poslab[dev,test]

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e '.[dev,test]'  # test: transformers, the tests' reference (keeps the torch above)
	touch $@

run: grid ## the main job: the where_am_i extrapolation grid (28 runs, no download) and its report

# The report reads the directory the multirun printed first ("multirun into DIR", poslab/runs/launching.py), never a
# glob of logs/: with POSLAB_LOG_DIR set, or another grid under ./logs, a glob would report on another grid. A
# multirun that fails stops here with its exit status, and nothing is reported.
grid: install ## 28 runs in parallel (POSLAB_JOBS at a time), then `poslab report grid` on them against the write-up
	@set -o pipefail; printed=$$(mktemp); trap 'rm -f "$$printed"' EXIT; \
	echo "$(PY) train.py -m experiment=extrapolation_grid"; \
	PYTHONUNBUFFERED=1 $(PY) train.py -m experiment=extrapolation_grid | tee "$$printed" || exit $$?; \
	sweep=$$(sed -n 's/^multirun into //p' "$$printed" | head -n 1); \
	if [ -z "$$sweep" ]; then \
		echo "make grid: the multirun printed no 'multirun into DIR' line, so there is no grid to report on;" \
			"report on its directory with: $(VENV)/bin/poslab report grid DIR --reference where_am_i" >&2; \
		exit 2; \
	fi; \
	echo "$(VENV)/bin/poslab report grid $$sweep --reference where_am_i"; \
	$(VENV)/bin/poslab report grid "$$sweep" --reference where_am_i

# Test counts collected at 2930be8 (pytest --collect-only); times measured on a clean clone on the 2 cores in session
# 39, when the suite held 2,242 tests (1,728 not slow): docs/testing.md, docs/tests_profile.md; the target is 6 min
test: install ## the whole suite (CPU, offline, random order; 2,534 tests at 2930be8; 5.5 min on 2 AMD cores, measured at 2,242 in session 39): what CI runs
	$(PY) -m pytest

# pytest's own options (workers, random order, time limit, durations) are in pyproject.toml's [tool.pytest.ini_options]
test-fast: install ## the tests not marked slow (CPU, offline; 2,007 tests at 2930be8; 70 s on 2 cores, measured at 1,728 in session 39): the check while working
	$(PY) -m pytest -m "not slow"

# The suite runs train.py in forked copies of its test process (tests/script_runs.py: no 5 s of imports a run);
# these tests of the command line run it here in new interpreters, as a user does. .ci/run runs both.
EXEC_TESTS := tests/test_refusals_leave_nothing.py tests/config/test_typed_settings.py tests/runs/test_resume.py tests/runs/test_interrupt.py
test-exec: install ## the command-line tests with train.py in new interpreters (POSLAB_TEST_EXEC=1), as a user runs it
	POSLAB_TEST_EXEC=1 $(PY) -m pytest $(EXEC_TESTS)

lint: install ## ruff
	$(VENV)/bin/ruff check .

format: install ## ruff format and fix
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: ## list the benchmarks: what each measures, and its command (add --quick: a smoke check, <= 3 min)
	@echo "Benchmarks (with .venv/bin/python; --quick: a smoke check of at most 3 minutes on 2 cores):"
	@echo "  the training step, poslab against a plain PyTorch loop, per encoding (byte model)  python benchmarks/byte_model.py"
	@echo "  the step in bf16 against fp32, poslab against a plain loop, beside the GEMM limit  python benchmarks/bf16_speed.py"
	@echo "  each encoding's training step against RoPE's, and its attention path               python benchmarks/encoding_cost.py"
	@echo "  the frontier methods' step and 16x-evaluation memory against RoPE's                python benchmarks/frontier_cost.py"
	@echo "  the lm_zoo test's cost in two rounds and in one against training, per encoding       python benchmarks/lm_zoo_eval_cost.py"
	@echo "  the training step against x-transformers' at equal shape, per encoding (byte model)   python benchmarks/peer_step.py"
	@echo "  the share of a recipe's run spent evaluating, against the 20% target                 python benchmarks/recipe_eval_share.py"
	@echo "  the training step with and without torch.compile                                   python benchmarks/compile.py"
	@echo "  ALiBi's bias mask against FlexAttention: attention and model tokens/s              python benchmarks/alibi_flex.py"
	@echo "  one evaluation pass at 1x-16x the context per attention path: time, memory         python benchmarks/long_eval.py"
	@echo "  one extrapolation-grid run (training + evaluation), poslab against the write-up    python benchmarks/grid_run.py"
	@echo "  seconds to the first line of a refused config's message                            python benchmarks/error_latency.py"
	@echo "  a run killed by SIGKILL and resumed, against an uninterrupted one                  python benchmarks/kill_resume.py"
	@echo "  one save of the test in progress (a whole Python test's sums): time, size, hash    python benchmarks/evaluation_checkpoint.py"
	@echo "  time and memory of poslab analyze hrope, 100 against 400 documents                 python benchmarks/hrope_analysis_cost.py"
	@echo "  peak memory of preparing a corpus, whole against a slice (POSLAB_DATA_DIR)         python benchmarks/prepare_memory.py"
	@echo "  bytes a token on disk, preparation MB/s, the batch cut (POSLAB_DATA_DIR)           python benchmarks/prepared_data.py"
	@echo "  held-out documents and bytes per corpus (POSLAB_DATA_DIR)                          python benchmarks/held_out_sample.py wikitext2"
	@echo "  where the test suite's time goes, from pytest's JUnit XML                          python benchmarks/suite_profile.py junit.xml"
	@echo "  a lent GPU: every GPU recipe's tokens/s, MFU and memory; compile; flex             python benchmarks/gpu_check.py OUT_DIR"

gpu-deps: install ## .gpu_deps/: the pure-Python packages a lent GPU's image lacks (hydra, omegaconf, antlr4, joblib launcher)
	rm -rf .gpu_deps && mkdir -p .gpu_deps/hydra_plugins
	sp=$$($(VENV)/bin/python -c "import omegaconf, pathlib; print(pathlib.Path(omegaconf.__file__).parents[1])") && \
	cp -r $$sp/hydra $$sp/omegaconf $$sp/antlr4 $$sp/hydra_core-*.dist-info $$sp/omegaconf-*.dist-info \
		$$sp/antlr4_python3_runtime-*.dist-info $$sp/hydra_joblib_launcher-*.dist-info .gpu_deps/ && \
	cp -r $$sp/hydra_plugins/hydra_joblib_launcher .gpu_deps/hydra_plugins/

# ./cache (POSLAB_CACHE_DIR's default: prepared corpora and trained tokenizers, slow to remake) and ./data are a
# user's prepared data and stay; delete ./cache by hand to prepare every corpus again.
clean: ## remove ./logs (every run), .pytest_cache and .ruff_cache; keeps .venv, ./cache and ./data
	rm -rf logs .pytest_cache .ruff_cache
