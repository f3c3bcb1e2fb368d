# Set-up in two commands: `make run` and `make test` (see README).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120

.PHONY: install dev bench-deps run test test-fast lint clean

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	touch $@

install dev: $(VENV)/.installed

bench-deps: $(VENV)/.installed
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev,bench]"

run: $(VENV)/.installed
	$(VENV)/bin/scarce run all

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

test: lint
	$(VENV)/bin/python -m pytest

# The edit-test loop: everything but the tests marked slow (servers, processes, whole flows).
test-fast: lint
	$(VENV)/bin/python -m pytest -m "not slow"

clean:
	rm -rf data/cache data/runs
