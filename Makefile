# Every target bootstraps its own .venv from pyproject.toml; nothing is installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: test test-fast lint typecheck docs pytest system-packages soak demo demo-cluster bench bench-quick clean

EXTRAS := cli,http,postgres,otel-sdk,warc

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]' --group dev --group docs
	touch $@

test: lint typecheck docs pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy --strict trio_batch benchmarks

# The Debian packages the suites drive (PostgreSQL, PgBouncer, Chromium): installed when
# missing (as root), or the one command to run is printed before any test starts.
system-packages:
	bash scripts/system-packages

# Bytecode caches on, even where the environment turns them off: without them every run
# recompiles the package in each process it starts, and pytest rewrites the asserts of every
# test module again (about 5 s of CPU for each xdist worker).
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest

pytest: $(STAMP) system-packages
	$(PYTEST)

# The inner loop: the suite without what needs PostgreSQL, PgBouncer or a browser, and
# without the slow suites (tests/support/markers.py sets the markers), spread over the
# machine's cores (pytest-xdist; ARGS="-n 0" for one process). Neither lint nor the
# docs build: `make test` before you push. ARGS go to pytest: make test-fast ARGS="-x tests/cli"
FAST := not postgres and not pgbouncer and not browser and not slow

test-fast: $(STAMP)
	$(PYTEST) -n auto -m "$(FAST)" $(ARGS)

# The hardening suites at full size (200 SIGKILLs, thousands of Hypothesis examples, a bigger
# load); each prints its figures at the end. About 10 minutes on a 2-core machine.
SOAK_SUITES := tests/runner/test_crash_campaign.py tests/runner/test_crash_campaign_postgres.py \
	tests/runner/test_fault_injection.py \
	tests/test_hostile_input.py tests/store/test_store_model.py tests/http/test_load.py

soak: $(STAMP) system-packages
	TRIO_BATCH_SOAK=1 $(PYTEST) --durations=12 $(SOAK_SUITES)

# The documentation site (docs/, Sphinx + MyST): warnings are errors, so a broken reference or
# a docstring that does not parse fails `make test`; tests/test_docs.py runs its examples.
docs: $(STAMP)
	$(BIN)/sphinx-build -q -E -W --keep-going -b html docs docs/_build/html

# Benchmarks (not part of `make test`; CI does not run them): each prints its ratios, measured
# side by side in one run, with the machine and the version. See docs/explanation/performance.md.
bench: $(STAMP) system-packages
	$(BIN)/python -m benchmarks.latency
	$(BIN)/python -m benchmarks.fetch
	$(BIN)/python -m benchmarks.open_load
	$(BIN)/python -m benchmarks.markdown
	$(BIN)/python -m benchmarks.pg_pressure
	$(BIN)/python -m benchmarks.worker_fairness

# The same at reduced sizes: a few minutes.
bench-quick: $(STAMP) system-packages
	$(BIN)/python -m benchmarks.latency --quick
	$(BIN)/python -m benchmarks.fetch --quick
	$(BIN)/python -m benchmarks.open_load --seconds 2 --rounds 1
	$(BIN)/python -m benchmarks.markdown --quick
	$(BIN)/python -m benchmarks.pg_pressure --quick
	$(BIN)/python -m benchmarks.worker_fairness --quick

# A real batch through `trio-batch run` against a local fixture server (demo/), offline.
demo: $(STAMP)
	$(BIN)/python demo/demo.py

# Two `trio-batch serve` processes sharing a throw-away local PostgreSQL (demo/cluster.py): a
# cross-server cancel, and a SIGKILLed server's jobs reaped by the other; offline.
demo-cluster: $(STAMP) system-packages
	$(BIN)/python demo/cluster.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache docs/_build
