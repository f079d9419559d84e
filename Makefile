# The README's two commands are `make serve` and `make test`; both set up .venv on first use.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8765
ARGS ?=
WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: serve cluster test unit contract bench mutation lint clean screenshot recordings coverage docs

# --no-compile: pip would compile every installed module's bytecode, serially (14 of the build's 35 CPU-s, 28 s of
# its 51), for a make test that imports 3,656 of the 10,045 modules (none of transformers' 2,951);
# the first import compiles and caches what is used. The targets below that start Python keep that cache (CACHE).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test,docs]'
	touch $(STAMP)

serve: $(STAMP)
	$(CACHE) $(BIN)/python -m emulator serve --host $(HOST) --port $(PORT) $(ARGS)

# One emulator for a team: WORKERS shards behind HAProxy (Debian's haproxy on PATH) on HOST:PORT; ARGS go to
# every shard (e.g. ARGS="--state-dir .state --clock manual"). docs/cluster.md, "One emulator for a team".
cluster: $(STAMP)
	$(CACHE) $(BIN)/python -m emulator cluster --workers $(WORKERS) --host $(HOST) --port $(PORT) $(ARGS)

# pytest-xdist workers of make test and make unit, each running whole modules (tests/conftest.py hands out
# the slowest first). Most tests wait (on servers, subprocesses, the SDK) rather than compute, so more
# workers than cores pay; RELIABILITY.md has the measurements. Tests marked `alone` bound a wall time: they
# run afterwards, by themselves.
TEST_JOBS ?= 4
PYTEST_PARALLEL := -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder -m "not alone"
# The tests start hundreds of Python processes (servers, the contract suite, pytest in pytest) that import the same
# modules: with PYTHONDONTWRITEBYTECODE set (some shells and CI images set it) each compiled the checkout's sources
# again and pytest rewrote every plugin's modules again (a contract suite run: 4.0 CPU-s, 2.1 with a bytecode
# cache). The tests run with the cache whatever the shell says; it goes to the git-ignored __pycache__/ and .venv.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE
CACHE := $(TEST_ENV)

# Every suite: unit + API + SDK end-to-end tests, and alongside them the contract suite against a fresh
# emulator (its output follows the tests'), then the tests marked alone. Fails when any of them failed.
# The contract run is also the healthy run of tests/test_contract_selftest.py (--shared-contract-run: its process,
# waited for, and its fresh report), and the parallel run names the tests it left alone (--alone-list), so the last
# run does not collect the suite again (RELIABILITY.md).
test: $(STAMP)
	@mkdir -p reports && rm -rf reports/contract reports/alone.args
	@$(TEST_ENV) $(BIN)/python -m contract_tests --report reports/contract > reports/contract.log 2>&1 & contract=$$!; \
	$(TEST_ENV) $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --alone-list reports/alone.args \
		--shared-contract-run "$$contract $(CURDIR)/reports/contract"; unit=$$?; \
	wait $$contract; suite=$$?; \
	echo "--- python -m contract_tests --report reports/contract (ran alongside; exit status $$suite)"; \
	cat reports/contract.log; \
	echo "--- the tests marked alone"; \
	$(TEST_ENV) $(BIN)/python -m pytest -q -m alone $$([ -s reports/alone.args ] && echo @reports/alone.args); alone=$$?; \
	[ $$unit -eq 0 ] && [ $$suite -eq 0 ] && [ $$alone -eq 0 ]

unit: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q $(PYTEST_PARALLEL)
	$(TEST_ENV) $(BIN)/python -m pytest -q -m alone

contract: $(STAMP)
	$(CACHE) $(BIN)/python -m contract_tests --report reports/contract

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

# Benchmarks against a bare Starlette ceiling; writes bench/results.json and BENCHMARKS.md.
bench: $(VENV)/.bench-installed
	$(CACHE) $(BIN)/python -m bench

# Mutation scores: seeded mutants of the emulator's vendor API, each run against the whole contract suite, and
# of its control plane, each against its unit tests (35-50 minutes on 2 shared cores); writes
# tests/mutation/mutation.json and MUTATION.md. ARGS: e.g. --sample 20 --control-plane-sample 5 --jobs 2.
mutation: $(STAMP)
	$(BIN)/python -m tests.mutation $(ARGS)

# Regenerate docs/dashboard.png (README's and docs/dashboard.md's picture of /_emulator/ui); needs chromium installed.
screenshot: $(STAMP)
	$(BIN)/python -m tests.dashboard_screenshot

# Re-record the demos of fixtures/recordings/ (tests/recordings.py) after an intended change in what the
# emulator answers; tests/test_fixtures.py fails until they match. Review the diff before committing it.
recordings: $(STAMP)
	$(BIN)/python -m tests.recordings

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/ruff check emulator contract_tests bench tests examples --select E,F,W,I,B --ignore E501,B905
	$(BIN)/mypy emulator contract_tests bench examples && $(BIN)/mypy --explicit-package-bases tests/mutation
	$(BIN)/mypy --strict --follow-imports=silent emulator/domain emulator/compute

# The docs site (mkdocs.yml, docs/) into site/; --strict: a broken link, anchor or page fails it (make test
# builds it too: tests/test_docs.py). `$(BIN)/mkdocs serve` previews it while editing.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Rewrite COVERAGE.md (spec operations versus handlers; tests/test_structure.py fails when it is stale).
coverage: $(STAMP)
	$(BIN)/python -m emulator.tools.coverage

clean:
	rm -rf $(VENV) reports .hypothesis site
