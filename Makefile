# The README's two commands are `make serve` and `make test`; both set up .venv on first use.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8765
ARGS ?=
WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: serve cluster test unit contract bench mutation lint clean screenshot recordings coverage

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/python -m emulator serve --host $(HOST) --port $(PORT) $(ARGS)

# One emulator for a team: WORKERS shards behind HAProxy (Debian's haproxy on PATH) on HOST:PORT; ARGS go to
# every shard (e.g. ARGS="--state-dir .state --clock manual"). README: "One emulator for a team".
cluster: $(STAMP)
	$(BIN)/python -m emulator cluster --workers $(WORKERS) --host $(HOST) --port $(PORT) $(ARGS)

# Every suite: unit + API + SDK end-to-end tests, then the contract suite against a fresh emulator.
test: $(STAMP)
	$(BIN)/python -m pytest -q
	$(BIN)/python -m contract_tests --report reports/contract

unit: $(STAMP)
	$(BIN)/python -m pytest -q

contract: $(STAMP)
	$(BIN)/python -m contract_tests --report reports/contract

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

# Benchmarks against a bare Starlette ceiling; writes bench/results.json and BENCHMARKS.md.
bench: $(VENV)/.bench-installed
	$(BIN)/python -m bench

# Mutation score of the contract suite: seeded mutants of the emulator, each run against the whole suite
# (35-45 minutes on 2 shared cores); writes bench/mutation.json and MUTATION.md. ARGS: e.g. --sample 20 --jobs 2.
mutation: $(STAMP)
	$(BIN)/python -m bench.mutation $(ARGS)

# Regenerate docs/dashboard.png (the README's picture of /_emulator/ui); needs chromium installed.
screenshot: $(STAMP)
	$(BIN)/python -m tests.dashboard_screenshot

# Re-record the demos of fixtures/recordings/ (tests/recordings.py) after an intended change in what the
# emulator answers; tests/test_fixtures.py fails until they match. Review the diff before committing it.
recordings: $(STAMP)
	$(BIN)/python -m tests.recordings

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/ruff check emulator contract_tests bench tests examples --select E,F,W,I,B --ignore E501,B905
	$(BIN)/mypy emulator contract_tests bench examples

# Rewrite COVERAGE.md (spec operations versus handlers; tests/test_structure.py fails when it is stale).
coverage: $(STAMP)
	$(BIN)/python -m emulator.tools.coverage

clean:
	rm -rf $(VENV) reports .hypothesis
