# The two commands a newcomer runs are `make run` and `make test`; each installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install lock docs browser node-deps migrate run test test-fast test-postgres lint format typecheck check bench clean

install: $(STAMP)

# Exactly the versions in requirements-dev.lock, checked against their hashes; then the project
# itself and its `sandbox` extra, the Stripe sandbox (sandbox/pyproject.toml), both editable, without
# resolving anything more. pip installs uv (requirements-uv.lock, hash-checked too) and uv the rest:
# pip took about a minute for what uv installs in seconds, and CI waits on it before any test.
# Compiled to bytecode as pip does (uv does not by default): where PYTHONDONTWRITEBYTECODE is set,
# as on CI's machines, nothing else ever writes it, and every process compiles what it imports.
UV_INSTALL := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
$(STAMP): pyproject.toml sandbox/pyproject.toml requirements-dev.lock requirements-uv.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --require-hashes --no-deps -r requirements-uv.lock
	$(UV_INSTALL) --require-hashes -r requirements-dev.lock
	$(UV_INSTALL) --no-deps -e . -e sandbox
	touch $(STAMP)

# Resolves the lock files from pyproject.toml, keeping today's pins where they still fit
# (`make lock LOCK_ARGS=--upgrade` moves everything to the newest allowed): the runtime set, which
# the image and the wheel's smoke test install, and the same pins plus the dev tools and the
# optional tracing extra (its tests need it). Never the `sandbox` extra: it is not on an index, and
# its dependencies are the service's own.
UV_COMPILE := $(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --quiet
lock: install
	$(UV_COMPILE) $(LOCK_ARGS) -o requirements.lock
	$(UV_COMPILE) --extra dev --extra otel -c requirements.lock -o requirements-dev.lock
	{ printf '# uv alone, its pin and hashes copied from requirements-dev.lock by `make lock`: pip installs it, then\n# uv installs requirements-dev.lock.\n'; \
	  grep -E '^uv==' requirements-dev.lock | sed 's/ .*//' | $(UV_COMPILE:pyproject.toml=-) --no-header; } > requirements-uv.lock

# docs/configuration.md is generated from the settings' docstrings; a unit test checks it is current.
docs: install
	$(BIN)/python -m service.configuration_doc > docs/configuration.md

# Playwright drives Debian's chromium; it never downloads a browser of its own.
browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

# The TypeScript SDK client used by the interop test, pinned by its package-lock.json. `npm ci`
# runs again only when package.json or the lock changes: it empties node_modules first, so running
# it on every `make test` would pull the files from under a suite that is already running.
NODE_DIR := tests/e2e/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed-stamp

node-deps: $(if $(wildcard $(NODE_DIR)/package-lock.json),$(NODE_STAMP))

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm; }
	cd $(NODE_DIR) && npm ci --silent --no-audit --no-fund
	touch $@

migrate: install
	$(BIN)/python -m service migrate

run: migrate
	$(BIN)/python -m service serve

# Branch coverage of service/ and stripe_sandbox/ is reported after the run; below the floor in pyproject.toml it fails.
COV_ARGS := --cov --cov-report=term-missing:skip-covered
# Worker processes (pytest-xdist): a suite mostly waits on servers, subprocesses and PostgreSQL, so
# two keep a small machine busy. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
WORKER_ARGS := -n $(TEST_WORKERS)
# The project's own bytecode, written up front: with PYTHONDONTWRITEBYTECODE set, each of the
# suite's processes (workers, replicas, CLI runs) would otherwise compile every module it imports
# afresh, about twice the CPU of a subprocess-heavy test. Up-to-date files are only checked.
COMPILE_SOURCES := $(BIN)/python -m compileall -q -j 0 service stripe_sandbox tests >/dev/null

test: install browser node-deps
	$(COMPILE_SOURCES)
	$(BIN)/python -m pytest $(WORKER_ARGS) $(COV_ARGS) $(PYTEST_ARGS)

# The fast tier, for the edit-test loop: unit tests and the MCP server in memory (tests/in_memory),
# with no HTTP server, browser or subprocess; `make test` runs them too.
test-fast: install
	$(COMPILE_SOURCES)
	$(BIN)/python -m pytest -q tests/unit tests/in_memory $(PYTEST_ARGS)

# The tests whose database follows TEST_DATABASE, on a PostgreSQL server at
# TEST_POSTGRES_URL=postgresql://user@host:port/db; the others run only in `make test`.
# Without coverage: `make test` measures it, and tracing every line costs CI time twice otherwise.
test-postgres: install browser node-deps
	$(COMPILE_SOURCES)
	TEST_DATABASE=postgres $(BIN)/python -m pytest $(WORKER_ARGS) $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check service stripe_sandbox sandbox tests bench alembic .ci
	$(BIN)/ruff format --check service stripe_sandbox sandbox tests bench alembic .ci

format: install
	$(BIN)/ruff format service stripe_sandbox sandbox tests bench alembic .ci
	$(BIN)/ruff check --fix service stripe_sandbox sandbox tests bench alembic .ci

# One mypy run over the code, the tests and the bench: they share most of what mypy reads, and
# .mypy_cache makes a run after a small change take about a second.
typecheck: install
	$(BIN)/mypy --strict service stripe_sandbox tests bench

check: lint typecheck test

# Benchmarks against a bare MCPServer in the same run; the table lands in bench/results/latest.md.
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
