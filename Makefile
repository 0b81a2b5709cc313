# `make demo` and `make test` work on a fresh machine: they create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check

.PHONY: demo test lint serve clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: pyproject.toml | $(VENV)/bin/python
	$(PIP) -e ".[server,client]"
	touch $@

# torch is pinned: an unpinned torch pulls a multi-GB CUDA build. It is only needed to export models and to test.
$(VENV)/.dev: pyproject.toml $(VENV)/.runtime
	$(PIP) "torch==2.13.0" -e ".[server,client,export,dev]"
	touch $@

demo: $(VENV)/.runtime
	$(PY) -m fleet.cli demo

test: $(VENV)/.dev
	$(PY) -m ruff check .
	$(PY) -m pytest -q -ra

lint: $(VENV)/.dev
	$(PY) -m ruff check .

serve: $(VENV)/.runtime
	$(PY) -m fleet.cli serve

clean:
	rm -rf var .pytest_cache .ruff_cache
