# Every target bootstraps its own .venv from pyproject.toml; nothing is installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: test lint typecheck pytest soak demo clean

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

# The hardening suites at full size (200 SIGKILLs, thousands of Hypothesis examples, a bigger
# load); each prints its figures at the end. About 10 minutes on a 2-core machine.
SOAK_SUITES := tests/test_crash_campaign.py tests/test_fault_injection.py \
	tests/test_hostile_input.py tests/test_store_model.py tests/test_load.py

soak: $(STAMP)
	TRIO_BATCH_SOAK=1 $(BIN)/pytest --durations=12 $(SOAK_SUITES)

demo: $(STAMP)
	@echo "make demo: the command-line demo is coming soon (see the issue tracker)."

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
