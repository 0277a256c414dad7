# The two commands: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean install

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/blockbudget demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite runs on every core (pytest-xdist; PYTEST_WORKERS=0 runs it in one process): each
# test has its own temporary folder, PostgreSQL database and ports.
PYTEST_WORKERS ?= auto

pytest: $(STAMP)
	./scripts/ensure-chromium.sh
	./scripts/with-postgres.sh $(BIN)/pytest -n $(PYTEST_WORKERS)

test: lint typecheck pytest

bench: $(STAMP)
	for script in benchmarks/*.py; do case $$script in benchmarks/scale_*) continue;; esac; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache results
