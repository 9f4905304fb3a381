# Set-up and everyday commands. `make demo` and `make test` work on a fresh machine with
# Python 3.11 and pip: the virtual environment is created on first use.

VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TEST_ENV := SCIPY_ARRAY_API=1 MKL_CBWR=AUTO,STRICT OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

.PHONY: install install-bench demo test bench clean distclean

$(PY):
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)

# Reinstall only when the package metadata changed since the last install.
# torch is pinned here and nowhere else.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[test]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(PIP) install -e ".[test,bench]"
	touch $@

install: $(VENV)/.installed

install-bench: $(VENV)/.installed-bench

demo: install
	$(PY) examples/demo.py --out demo_output

test: install
	$(TEST_ENV) $(PY) -m pytest -n 2 tests

bench: install-bench
	set -e; for f in $(sort $(wildcard benchmarks/*.py)); do echo "== $$f"; $(PY) $$f; done

clean:
	rm -rf build demo_output benchmarks/results .pytest_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
