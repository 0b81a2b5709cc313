# `make demo` and `make test` work on a fresh machine: they create .venv and install what they need,
# at the exact versions pinned in constraints.txt (the lock; see docs/dependencies.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check

# The lock: one pip-tools constraints file pinning every extra (server, client, export, dev) and all they
# pull in, torch 2.13.0 CPU included. Each install is constrained by it, so whatever pyproject's ranges
# allow, a fresh clone gets exactly the versions CI tested.
LOCK := constraints.txt

# pip-compile lives in its own venv so that the tool that writes the lock is not part of it.
LOCK_VENV ?= .venv-lock
PIP_TOOLS := pip-tools==7.6.2
COMPILE := $(LOCK_VENV)/bin/pip-compile -q --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links

.PHONY: demo demo-phones test test-all test-postgres lint serve app vendor lock upgrade-lock clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Re-installs whenever the lock or pyproject.toml changes.
$(VENV)/.runtime: $(LOCK) pyproject.toml | $(VENV)/bin/python
	$(PIP) -c $(LOCK) -e ".[server,client]"
	touch $@

# torch is pinned in the lock as 2.13.0+cpu: an unpinned torch pulls a multi-GB CUDA build.
# The app extra (Kivy) is part of the dev venv so that `make test` runs the app's tests.
$(VENV)/.dev: $(LOCK) pyproject.toml $(VENV)/.runtime
	$(PIP) -c $(LOCK) -e ".[server,client,export,dev,app,ray]"
	touch $@

# The browser device (server/device, docs/browser-device.md) trains with ONNX Runtime Web, pinned exactly in
# web/device/package-lock.json: `npm ci` there, then only the three files the page loads are copied into the
# gitignored server/device/static/vendor/, each with a gzip copy the coordinator sends to browsers that
# accept it. Needs Node.js 18+ and npm (the registry, or npm's cache); reruns when the lock changes.
DEVICE_WEB := web/device
ORT_DIST := $(DEVICE_WEB)/node_modules/onnxruntime-web/dist
VENDOR := server/device/static/vendor
VENDOR_FILES := ort.wasm.min.mjs ort-wasm-simd-threaded.mjs ort-wasm-simd-threaded.wasm

$(VENDOR)/.built: $(DEVICE_WEB)/package.json $(DEVICE_WEB)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js 18+) is needed to vendor ONNX Runtime Web for /device/"; exit 1; }
	npm ci --prefix $(DEVICE_WEB) --ignore-scripts --no-audit --no-fund --silent
	rm -rf $(VENDOR) && mkdir -p $(VENDOR)
	cd $(ORT_DIST) && cp $(VENDOR_FILES) $(CURDIR)/$(VENDOR)/
	for f in $(VENDOR_FILES); do gzip -9 -n -k $(VENDOR)/$$f; done
	cd $(DEVICE_WEB) && node -p "'onnxruntime-web ' + require('./node_modules/onnxruntime-web/package.json').version + ', MIT License, Copyright (c) Microsoft Corporation'" > $(CURDIR)/$(VENDOR)/VERSION.txt
	touch $@

vendor: $(VENDOR)/.built

demo: $(VENV)/.runtime $(VENDOR)/.built
	$(PY) -m fleet.cli demo

# The demo on the LAN address, with a join code's QR code for real phones' browsers (README: a phone in a minute).
demo-phones: $(VENV)/.runtime $(VENDOR)/.built
	$(PY) -m fleet.cli demo --phones

# Two tiers (pytest's `slow` marker divides them; tests/conftest.py puts every PostgreSQL test in it):
# `make test` is the everyday tier: ruff, the import contracts and the fast tests (units, the API in process on
# SQLite, the client, the console without a browser), within 5 minutes; it prints the 15 slowest tests. The
# fast tests run on every core (pytest-xdist); the slow ones one at a time, since they share PostgreSQL's
# templates, real ports and the machine's timing.
# `make test-all` is everything, CI's tier: the fast tests plus the browser, Xvfb, PostgreSQL, real processes,
# kill -9, the scale-out topology, live experiments and Ray. With CI=true an unreachable PostgreSQL fails
# the run instead of skipping. The console's browser tests drive Debian's chromium (never a browser
# downloaded by Playwright); the device app's tests run Kivy under Debian's Xvfb (Mesa llvmpipe).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null

XVFB := /usr/bin/Xvfb
$(XVFB):
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xvfb xauth) >/dev/null

PYTEST := $(PY) -m pytest -q -ra --durations=15 --durations-min=0.5

test: lint $(VENDOR)/.built
	$(PYTEST) -n auto -m "not slow"

test-all: test $(CHROMIUM) $(XVFB)
	$(PYTEST) -m slow

# Only the PostgreSQL variants (part of `make test-all`): quick to rerun after a storage change.
test-postgres: $(VENV)/.dev
	$(PY) -m pytest -q -ra -m postgres

# ruff, then import-linter: the layers and forbidden imports of pyproject.toml's [tool.importlinter].
lint: $(VENV)/.dev
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

serve: $(VENV)/.runtime $(VENDOR)/.built
	$(PY) -m fleet.cli serve

# The device app on this desktop (a Kivy window); android-build/ packages it for phones.
$(VENV)/.app: $(LOCK) pyproject.toml $(VENV)/.runtime
	$(PIP) -c $(LOCK) -e ".[server,client,app]"
	touch $@

app: $(VENV)/.app
	$(PY) -m fleet.cli app

$(LOCK_VENV)/bin/pip-compile:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --disable-pip-version-check "$(PIP_TOOLS)"

# Re-resolve after editing pyproject.toml's dependencies, keeping every pin that still fits.
# Run it with Python 3.11 on linux x86_64: the lock is for that platform.
lock: $(LOCK_VENV)/bin/pip-compile
	$(COMPILE) $(UPGRADE) --extra server --extra client --extra export --extra dev --extra app --extra ray -o $(LOCK) pyproject.toml

# Move every pin to the newest release that pyproject.toml allows (then run `make test` and commit the lock).
upgrade-lock:
	$(MAKE) lock UPGRADE=--upgrade

clean:
	rm -rf var .pytest_cache .ruff_cache
