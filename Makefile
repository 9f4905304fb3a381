# Set-up and everyday commands. `make demo` and `make test` work on a fresh machine with
# Python 3.11 and pip: the virtual environment is created on first use.

VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# glibc keeps freed memory up to 128 MiB and serves blocks under 32 MiB from its heap, as
# skgpx.distributed.worker_config() does for Dask workers: without it each large temporary
# is a fresh mmap whose pages fault in again (a deep Q-EP epoch on 500 rows: 114 -> 85 ms).
MALLOC_ENV := MALLOC_TRIM_THRESHOLD_=134217728 MALLOC_MMAP_THRESHOLD_=33554432
TEST_ENV := SCIPY_ARRAY_API=1 MKL_CBWR=AUTO,STRICT OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(MALLOC_ENV)

.PHONY: install install-bench demo test test-fast bench docs docs-noplot docs-quick docs-clean clean distclean

$(PY):
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)

# Reinstall only when the package metadata changed since the last install (the version is
# read from skgpx/_version.py, so that an editable install's metadata follows it too).
# torch is pinned here and nowhere else.
# pip writes the bytecode of every installed module on one core (70 of the install's 130 s
# on a clean clone); compileall does the same on every core afterwards (35 s on two). Like
# pip, it leaves files that do not parse (a few test fixtures in the dependencies) uncompiled,
# so its exit status is not ours.
COMPILE := $(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null 2>&1 || true

$(VENV)/.installed: pyproject.toml skgpx/_version.py | $(PY)
	$(PIP) install --no-compile torch==2.13.0
	$(PIP) install --no-compile -e ".[test]"
	$(COMPILE)
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(PIP) install --no-compile -e ".[test,bench]"
	$(COMPILE)
	touch $@

install: $(VENV)/.installed

install-bench: $(VENV)/.installed-bench

demo: install
	$(PY) examples/demo.py --out demo_output

# flake8 first (seconds; its settings are in setup.cfg), then the whole suite
test: install
	$(PY) -m flake8
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist worksteal --durations=25 tests

# The loop to iterate with: every unit, contract, parity and bad-input test, scikit-learn's
# full check suite on one configuration per estimator and its API checks on the others,
# without what the `slow` marker carries (the paper-level checks, the full check suite of
# the other configurations, the documentation build, the README's code blocks, all but one
# case of tests repeated over interchangeable cases: tests/conftest.py), which `make test`
# runs; extra pytest options in PYTEST_ARGS, e.g. make test-fast PYTEST_ARGS="-k dkp".
PYTEST_ARGS ?=
test-fast: install
	$(PY) -m flake8
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist worksteal --durations=10 -m "not slow" $(PYTEST_ARGS) tests

# The documentation (HTML in doc/_build/html), warnings as errors.  `make docs` runs every
# gallery example; `docs-noplot` writes the gallery pages without running them (seconds);
# `docs-quick` runs them on their small settings (SKGPX_EXAMPLE_SIZE=small).
# Extra sphinx-build options: make docs SPHINXOPTS="-j 2".
SPHINXOPTS ?=
SPHINXBUILD = $(PY) -m sphinx -b html -W --keep-going $(SPHINXOPTS)

docs: install
	$(SPHINXBUILD) doc doc/_build/html

docs-noplot: install
	$(SPHINXBUILD) -D plot_gallery=0 doc doc/_build/html

docs-quick: install
	SKGPX_DOCS_QUICK=1 $(SPHINXBUILD) doc doc/_build/html

docs-clean:
	rm -rf doc/_build doc/auto_examples doc/generated doc/sg_execution_times.rst

bench: install-bench
	set -e; for f in $(sort $(wildcard benchmarks/*/[a-z]*.py)); do echo "== $$f"; $(PY) $$f; done

clean:
	rm -rf build demo_output benchmarks/results .pytest_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
