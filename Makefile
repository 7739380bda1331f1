# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv from a Python 3.12+ found by .ci/find_python.sh and install
# requirements.txt, requirements-dev.txt, the host libraries' model code
# (requirements-hosts.txt, without their dependencies: see docs/getting_started.md) and the
# package (editable); re-running skips that step when none of those files changed.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= runs/demo
PYTEST_ARGS ?=
# The suite on this many processes (pytest-xdist), a test file's tests on one
# of them (module fixtures stay shared); 0: in this process. The slowest tests
# are listed at the end (CI's log says where its minutes went).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20

.PHONY: venv demo lint format test test-fast docs bench clean
LINTED := bifocal_jax train.py eval.py configs experiments benchmarks tests docs examples

venv: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt requirements-hosts.txt constraints.txt pyproject.toml
	@test -x $(PY) || { PYTHON=$$(bash .ci/find_python.sh) && echo "creating $(VENV) with $$PYTHON" && $$PYTHON -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -c constraints.txt -r requirements-hosts.txt
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

# constraints.txt from the environment the suite passed in (after changing a requirement).
constraints: $(STAMP)
	@{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^-e'; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt

# The main job: train the default Dyck config, then evaluate it.
demo: $(STAMP)
	$(PY) train.py --config configs/dyck.py --workdir $(DEMO_DIR)
	$(PY) eval.py --workdir $(DEMO_DIR)

# The linter (ruff) on everything, the import layers and circles (import-linter),
# the formatter (yapf, 2-space Google style) on the package; all configured in
# pyproject.toml. `make format` rewrites.
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/yapf --diff --recursive --parallel bifocal_jax

format: $(STAMP)
	$(VENV)/bin/yapf --in-place --recursive --parallel bifocal_jax

# The linter and the formatter's check, then the whole suite, slow
# end-to-end tests included (what CI runs).
test: lint
	$(PYTEST) $(PYTEST_ARGS)

# The same, without the slow end-to-end tests.
test-fast: lint
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

# The documentation site (Sphinx with MyST and myst-nb, configured in docs/conf.py)
# into docs/_build/html, warnings as errors (what CI runs after the tests).
docs: $(STAMP)
	@$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info docs/_build
