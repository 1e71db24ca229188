# Every target bootstraps its own .venv from pyproject.toml; nothing is installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: test lint typecheck pytest demo bench bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict trio_batch

pytest: $(STAMP)
	$(BIN)/pytest

# Benchmarks (not part of `make test`; CI does not run them). The `bench` extra adds the peers.
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run --quick

# A real batch through `trio-batch run` against a local fixture server (demo/), offline.
demo: $(STAMP)
	$(BIN)/python demo/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
