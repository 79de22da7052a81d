# trainbench — `make help` lists the targets. `make run` and `make test` work on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# CPU build of torch installed first when no GPU is present, so that the torch range in pyproject does not
# pull a multi-GB CUDA build. Set TORCH_INDEX to a CPU wheel index if your default index serves CUDA wheels.
TORCH_CPU_VERSION ?= 2.13.0
TORCH_INDEX ?=
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
# The trainer profile: auto = run.py's own choice (the GPU profile on a GPU, the CPU profile elsewhere, printed
# with its reason), the same as a plain `python run.py`; PROFILE=default|cpu|quick forces one.
PROFILE ?= auto
# The local card a CPU-only `make run` projects to (conf/hardware/<entry>): "how long on my GPU?"
LOCAL_GPU ?= rtx3050ti_4gb
PORT ?= 5000
# `make server`: loopback by default (HOST=0.0.0.0 only behind auth, see docs/scaling-out.md)
HOST ?= 127.0.0.1
BACKEND_STORE ?= sqlite:///$(CURDIR)/mlruns/server.db
ARTIFACTS ?= $(CURDIR)/mlruns/server-artifacts
SERVER_ARGS ?=
SPOOL ?= mlruns/spool
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: 3 on the 2-core CI machine. Much of the suite waits on subprocesses,
# servers and SLURM, so two workers kept the CPU 84% busy; a third fills the gaps (fresh clones here: 1.68 of 2
# cores used with 2 workers, 1.77 with 3). 0 runs it in one process, auto one per core.
PYTEST_WORKERS ?= 3
# The suite starts about 150 Python processes from this source tree. With PYTHONDONTWRITEBYTECODE set (as some
# containers do) each recompiled trainbench (~0.25 CPU-s) and each xdist worker re-rewrote every test module's
# asserts: the test targets let Python cache bytecode in the tree's (git-ignored) __pycache__ folders.
TEST_ENV = PYTHONDONTWRITEBYTECODE=

.DEFAULT_GOAL := help
.PHONY: help install run sweep analyze ui server sync test test-fast docs-check lint bench gpu-check gpu-kit data clean

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

install: $(STAMP) ## Create .venv and install trainbench with its dev tools, submitit and psycopg2 (CPU torch where no GPU)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if [ "$(HAS_GPU)" = "0" ] && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
	  echo "no GPU found: installing the CPU build of torch $(TORCH_CPU_VERSION) first"; \
	  $(BIN)/python -m pip install -q "torch==$(TORCH_CPU_VERSION)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)); \
	fi
	$(BIN)/python -m pip install -q -e ".[dev,slurm,postgres]"
	@touch $(STAMP)

run: install ## The main job: sweep every registered model on the embedded 6E data, then analyse it
	@$(BIN)/python run.py -m trainer=$(PROFILE) hydra.sweep.dir=multirun/$$(date +%Y-%m-%d_%H-%M-%S) ; status=$$? ; \
	  $(BIN)/python analyze.py sweep=latest $(if $(filter cpu,$(PROFILE))$(filter 0,$(HAS_GPU)),hardware=$(LOCAL_GPU)) || status=$$? ; exit $$status

sweep: install ## A custom sweep: make sweep ARGS="model=dqn,ppo model.batch_size=64,230"
	$(BIN)/python run.py -m trainer=$(PROFILE) $(ARGS)

analyze: install ## Analyse the newest sweep (ARGS="sweep=<id>" for another)
	$(BIN)/python analyze.py $(ARGS)

ui: install ## The MLflow UI over the embedded store on http://127.0.0.1:5000 (PORT=...)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlruns/mlflow.db --host 127.0.0.1 --port $(PORT)

server: install ## An MLflow tracking server on 127.0.0.1:5000 (PORT, HOST, BACKEND_STORE, ARTIFACTS, SERVER_ARGS; docs/scaling-out.md)
	$(BIN)/mlflow server --backend-store-uri $(BACKEND_STORE) \
	  --artifacts-destination $(ARTIFACTS) --host $(HOST) --port $(PORT) $(SERVER_ARGS)

sync: install ## Upload runs' writes spooled while the tracking server was away (SPOOL=mlruns/spool)
	$(BIN)/trainbench sync $(SPOOL) $(ARGS)

test: install docs-check ## Run the test suite (GPU tests skip without CUDA), after docs-check
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=20 $(PYTEST_ARGS)

test-fast: install ## The inner loop (< 2 min here): the suite without the tests marked slow (sweeps, subprocesses, servers)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow" $(PYTEST_ARGS)

docs-check: install ## Regenerate every generated document (docs/report-schema.md) and fail on a difference
	$(BIN)/trainbench docs --check

lint: install ## ruff over the sources and tests
	$(BIN)/ruff check src tests benchmarks run.py analyze.py

bench: install ## The benchmark suite: ratios and rates measured side by side (writes benchmarks/results/)
	$(BIN)/python benchmarks/run_all.py $(ARGS)

gpu-check: install ## On a GPU (< 8 min): sync self-test, GPU tests, short sweep with memory and MFU (exit 2 without a GPU)
	$(BIN)/python scripts/gpu_check.py $(ARGS)

gpu-kit: install ## Wheels for the lent GPU machine into .whl/ (Python 3.12, no registry there), checked offline; then scripts/gpu_run.sh
	$(BIN)/python scripts/gpu_kit.py $(ARGS)

data: install ## Download the real 90-day ES/NQ/ZN/6E bars from Databento (needs DATABENTO_API_KEY; shows the cost first)
	$(BIN)/python -m trainbench.data download data=futures_90d $(ARGS)

clean: ## Remove generated data, runs, reports, Hydra outputs and bytecode caches (keeps the venv)
	rm -rf outputs multirun reports .pytest_cache
	find src tests examples benchmarks scripts -name __pycache__ -type d -exec rm -rf {} + 2>/dev/null || true
	find mlruns data -mindepth 1 ! -name .gitkeep -exec rm -rf {} + 2>/dev/null || true
