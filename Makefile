# Set-up in two commands: `make run` and `make test` (see README).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
# Compiled bytecode kept (in the __pycache__ folders git ignores): the tests start hundreds of
# Python processes, and an environment with PYTHONDONTWRITEBYTECODE set had each of them compile
# the project's modules again, and each test process rewrite every test module's asserts again.
unexport PYTHONDONTWRITEBYTECODE
# Test processes (pytest-xdist). Whole files go to one process (--dist loadfile): a module's
# project fixture and its tests' order stay together; each process has its own Prefect home
# and temporary server. Much of the slow tier waits on servers and child processes, so two
# processes help even on 2 cores; TEST_WORKERS=0 runs everything in one process. Files are
# handed out slowest first, by the seconds in tests/durations.json (tests/durations.py).
TEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

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
	$(PYTEST)

# The edit-test loop: everything but the tests marked slow (servers, processes, whole flows).
test-fast: lint
	$(PYTEST) -m "not slow"

clean:
	rm -rf data/cache data/runs
