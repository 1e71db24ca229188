# Every target bootstraps its own .venv from pyproject.toml; nothing is installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: test lint typecheck pytest demo clean

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

# A real batch through `trio-batch run` against a local fixture server (demo/), offline.
demo: $(STAMP)
	$(BIN)/python demo/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
